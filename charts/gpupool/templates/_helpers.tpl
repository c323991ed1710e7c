{{/*
Names. With the release named "gpupool" (as the README installs it) every object is named as
config/default and config/agent name it: gpupool-manager, gpupool-agent, gpupool-plan-approval...
*/}}
{{- define "gpupool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpupool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpupool.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpupool.labels" -}}
helm.sh/chart: {{ include "gpupool.chart" . }}
app.kubernetes.io/name: {{ include "gpupool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpupool
{{- end -}}

{{- define "gpupool.managerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpupool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "gpupool.managerLabels" -}}
{{ include "gpupool.labels" . }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "gpupool.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpupool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "gpupool.agentLabels" -}}
{{ include "gpupool.labels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* The manager's ServiceAccount and the user name the API server gives it. */}}
{{- define "gpupool.managerServiceAccount" -}}
{{- default (printf "%s-manager" (include "gpupool.fullname" .)) .Values.manager.serviceAccount.name -}}
{{- end -}}

{{- define "gpupool.managerSubject" -}}
- kind: ServiceAccount
  name: {{ include "gpupool.managerServiceAccount" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{- define "gpupool.managerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpupool.managerServiceAccount" .) -}}
{{- end -}}

{{/*
The agent's namespace: its own, because its hostPath volume (the kubelet's PodResources socket)
needs Pod Security "privileged" while the manager's namespace can stay "restricted".
*/}}
{{- define "gpupool.agentNamespace" -}}
{{- default (printf "%s-agent" (include "gpupool.fullname" .)) .Values.agent.namespace -}}
{{- end -}}

{{- define "gpupool.agentServiceAccount" -}}
{{- default (printf "%s-agent" (include "gpupool.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- end -}}

{{- define "gpupool.agentUser" -}}
{{- printf "system:serviceaccount:%s:%s" (include "gpupool.agentNamespace" .) (include "gpupool.agentServiceAccount" .) -}}
{{- end -}}

{{/*
An image reference from {repository, tag, digest}: the tag defaults to the chart's appVersion,
which is how `make images` tags a release commit; a digest, when given, pins it.
Call with (dict "image" .Values.manager.image "context" $).
*/}}
{{- define "gpupool.image" -}}
{{- $tag := default .context.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The namespace a Role of config/rbac/role.yaml goes to. controller-gen writes the namespaces of
the +kubebuilder:rbac markers; the chart moves gpupool's own (gpupool-system) to the release's,
the GPU Operator's (gpu-operator) to gpuOperator.namespace and the agent's (gpupool-agent) to
the agent's namespace. Call with (list $ "<ns>").
*/}}
{{- define "gpupool.roleNamespace" -}}
{{- $root := index . 0 -}}
{{- $ns := index . 1 -}}
{{- if eq $ns "gpupool-system" -}}
{{- $root.Release.Namespace -}}
{{- else if eq $ns "gpu-operator" -}}
{{- $root.Values.gpuOperator.namespace -}}
{{- else if eq $ns "gpupool-agent" -}}
{{- include "gpupool.agentNamespace" $root -}}
{{- else -}}
{{- $ns -}}
{{- end -}}
{{- end -}}

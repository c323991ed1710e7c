{{- define "type" -}}
{{- $type := . -}}
{{- if markdownShouldRenderType $type }}

### {{ $type.Name }}
{{ if $type.IsAlias }}
Underlying type: {{ template "typeRef" $type.UnderlyingType }}
{{ end }}
{{ $type.Doc }}
{{ template "rules" $type }}
{{- if $type.References }}
Appears in: {{ range $i, $r := $type.SortedReferences }}{{ if $i }}, {{ end }}[{{ $r.Name }}](#{{ lower $r.Name }}){{ end }}
{{ end }}
{{- if $type.Members }}
| Field | Type | Description | Default | Validation |
| --- | --- | --- | --- | --- |
{{- if $type.GVK }}
| `apiVersion` | string | `{{ $type.GVK.Group }}/{{ $type.GVK.Version }}` | | |
| `kind` | string | `{{ $type.GVK.Kind }}` | | |
{{- end }}
{{- range $type.Members }}
| `{{ .Name }}` | {{ template "typeRef" .Type }} | {{ template "type_members" . }} | {{ with .Default }}`{{ . }}`{{ end }} | {{ template "validation" . }} |
{{- end }}
{{ end }}
{{- if $type.EnumValues }}
| Value | Description |
| --- | --- |
{{- range $type.EnumValues }}
| `{{ .Name }}` | {{ template "doc" .Doc }} |
{{- end }}
{{ end }}
{{- end }}
{{- end -}}

{{- /* typeRef names a type without leaving the repository: gpupool's own types link to their
section, Kubernetes' and Go's are named with their package. */ -}}
{{- define "typeRef" -}}
{{- if not . }}?
{{- else if eq .Kind 3 }}map\[{{ template "typeRef" .KeyType }}\]{{ template "typeRef" .ValueType }}
{{- else if eq .Kind 5 }}\[\]{{ template "typeRef" .UnderlyingType }}
{{- else if eq .Kind 4 }}{{ template "typeRef" .UnderlyingType }}
{{- else if and (hasPrefix "github.com/gpupool/gpupool/" .Package) (not .IsBasic) }}[{{ .Name }}](#{{ lower .Name }})
{{- else if .Package }}{{ base (dir .Package) }}/{{ base .Package }}.{{ .Name }}
{{- else }}{{ .Name }}
{{- end -}}
{{- end -}}

{{- /* rules lists a type's validation, and its CEL rules with the message the API server answers. */ -}}
{{- define "rules" -}}
{{- with .Validation }}
Validation: {{ range $i, $v := . }}{{ if $i }}; {{ end }}{{ template "marker" $v }}{{ end }}
{{ end }}
{{- with index .Markers "kubebuilder:validation:XValidation" }}
Rules the API server enforces:
{{ range . }}
- `{{ .Rule }}`{{ with .Message }}: {{ . }}{{ end }}
{{- end }}
{{ end }}
{{- end -}}

{{- /* validation is a field's cell. A field of one of gpupool's types that has CEL rules of its
own shows them in that type's section, not again here. */ -}}
{{- define "validation" -}}
{{- $t := .Type -}}
{{- if eq $t.Kind 4 }}{{ $t = $t.UnderlyingType }}{{ end -}}
{{- $own := and (hasPrefix "github.com/gpupool/gpupool/" $t.Package) (index $t.Markers "kubebuilder:validation:XValidation") -}}
{{- $items := list -}}
{{- range .Validation }}{{ if not (has . (list "Optional: {}" "XIntOrString: {}")) -}}
{{ $items = append $items (replace "|" "\\|" (ternary "Required" . (eq . "Required: {}"))) }}{{ end }}{{ end -}}
{{- if $own }}{{ $items = append $items (printf "rules of [%s](#%s)" $t.Name (lower $t.Name)) -}}
{{- else }}{{ range index .Markers "kubebuilder:validation:XValidation" -}}
{{ $items = append $items (printf "rule `%s`%s" (replace "|" "\\|" .Rule) (ternary (printf ": %s" (replace "|" "\\|" .Message)) "" (ne .Message ""))) -}}
{{ end }}{{ end -}}
{{ join "<br />" $items }}
{{- end -}}

{{- /* marker renders one kubebuilder validation marker as crd-ref-docs reads it; "Optional"
and int-or-string carry nothing a reader needs. */ -}}
{{- define "marker" -}}
{{- if or (eq . "Optional: {}") (eq . "XIntOrString: {}") }}
{{- else if eq . "Required: {}" }}Required
{{- else }}{{ . }}
{{- end -}}
{{- end -}}

{{- define "type_members" -}}
{{- if eq .Name "metadata" -}}
Kubernetes object metadata (name, namespace, labels, annotations...).
{{- else -}}
{{ template "doc" .Doc }}
{{- end -}}
{{- end -}}

{{- /* doc is a Go comment in a table cell: wrapped lines joined, paragraphs kept. */ -}}
{{- define "doc" -}}
{{- trim . | replace "|" "\\|" | replace "\n\n" "<br /><br />" | replace "\n" " " -}}
{{- end -}}

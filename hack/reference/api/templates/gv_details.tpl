{{- define "gvDetails" -}}
{{- $gv := . -}}
## {{ $gv.GroupVersionString }}

{{ $gv.Doc }}
{{ if $gv.Kinds }}
Resource types:
{{ range $gv.SortedKinds }}
- [{{ . }}](#{{ lower . }})
{{- end }}
{{ end }}
{{- range $gv.SortedTypes }}
{{- template "type" . }}
{{- end }}
{{- end -}}

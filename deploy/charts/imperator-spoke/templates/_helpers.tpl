{{/*
The namespace every object goes into: the agent's generated Role, its
webhook configurations and their namespace exclusions name it, so it is not
a value.
*/}}
{{- define "imperator-spoke.namespace" -}}
imperator-system
{{- end }}

{{/*
Labels of every object: the kustomize base's part-of label and Helm's
release labels. Selectors use app.kubernetes.io/name alone, as the kustomize
base does, so that an agent installed with kustomize can move to the chart.
*/}}
{{- define "imperator-spoke.labels" -}}
app.kubernetes.io/part-of: imperator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
imperator-spoke.manifests decodes the generated multi-document YAML file
.file of files/ (copied there by make generate from deploy/spoke) into a JSON
list of its objects; use it with fromJsonArray:
  include "imperator-spoke.manifests" (dict "Files" .Files "file" "files/rbac/role.yaml") | fromJsonArray
A missing file or a document that does not parse fails the render with the
file's name.
*/}}
{{- define "imperator-spoke.manifests" -}}
{{- $file := .file -}}
{{- $text := .Files.Get $file -}}
{{- if not $text -}}
{{- fail (printf "%s is missing or empty: run make generate" $file) -}}
{{- end -}}
{{- $objs := list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if hasKey $obj "Error" -}}
{{- fail (printf "%s: %s" $file $obj.Error) -}}
{{- end -}}
{{- if $obj -}}
{{- $objs = append $objs $obj -}}
{{- end -}}
{{- end -}}
{{- toJson $objs -}}
{{- end }}

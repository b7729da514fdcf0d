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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount the spoke's pods run as: serviceAccount.name, else
imperator-spoke. Bindings and the pool-guests-only policy name it.
*/}}
{{- define "imperator-spoke.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "imperator-spoke" -}}
{{- end }}

{{/*
nameOverride and fullnameOverride are accepted only empty: the objects'
names are part of the contract (docs/contract.md) and fixed in the spoke's
code and generated manifests (webhook configurations, Secrets, Leases, the
Service the agent writes its certificate for), so a renamed object would be
one nobody uses. One release per cluster, in imperator-system.
*/}}
{{- define "imperator-spoke.checkNames" -}}
{{- range $key := list "nameOverride" "fullnameOverride" }}
{{- if index $.Values $key }}
{{- fail (printf "%s=%q: the chart's object names cannot be changed (the spoke finds its objects by their fixed names, docs/contract.md); install one release per cluster and leave %s empty" $key (index $.Values $key) $key) }}
{{- end }}
{{- end }}
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

{{/*
The container's env beyond the chart's own: env (NAME: value) in name order,
then extraEnv (full EnvVar entries, valueFrom included). A name the chart
sets itself (POD_NAMESPACE, HUB_ADDRESS, CLUSTER_NAME) fails the render naming it.
*/}}
{{- define "imperator-spoke.extraEnv" -}}
{{- $reserved := list "POD_NAMESPACE" "HUB_ADDRESS" "CLUSTER_NAME" -}}
{{- $vars := list -}}
{{- $env := .Values.env | default dict -}}
{{- range $name := keys $env | sortAlpha -}}
{{- $vars = append $vars (dict "name" $name "value" (toString (index $env $name))) -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- $vars = append $vars . -}}
{{- end -}}
{{- range $vars -}}
{{- if has .name $reserved -}}
{{- fail (printf "env/extraEnv: %s is set by the chart itself (POD_NAMESPACE, HUB_ADDRESS, CLUSTER_NAME); choose another name" .name) -}}
{{- end -}}
{{- end -}}
{{- with $vars -}}
{{- toYaml . -}}
{{- end -}}
{{- end }}

{{/*
The pod's and the container's securityContext: the values, else the
restricted defaults. The fallback is for `helm upgrade --reuse-values` from a
chart that had no such values (Helm then takes the old chart's values, in
which they are missing): the pods stay restricted rather than lose it.
*/}}
{{- define "imperator-spoke.podSecurityContext" -}}
{{- toYaml (.Values.podSecurityContext | default (dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault"))) -}}
{{- end }}
{{- define "imperator-spoke.securityContext" -}}
{{- toYaml (.Values.securityContext | default (dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "capabilities" (dict "drop" (list "ALL")))) -}}
{{- end }}

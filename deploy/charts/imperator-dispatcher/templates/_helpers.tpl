{{/*
The namespace every namespaced object goes into: namespaceOverride, else the
release's namespace (helm install -n). The generated RBAC, webhook
configurations and admission policies of files/ name imperator-system, as the
kustomize bases install them; the templates write this namespace into them.
*/}}
{{- define "imperator-dispatcher.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end }}

{{/*
Refuses a release whose objects the chart of v0.1.0 put into imperator-system
while Helm recorded the release in another namespace (helm install without
-n imperator-system): upgraded as it is, the chart would move the dispatcher into
the release's namespace. Only objects this very release owns count (Helm's
release-name and release-namespace annotations); helm template, which looks
nothing up, renders on.

It also refuses a namespace that is not a namespace name (it is written
into CEL and JSON) and the shared ones (default, kube-*): the chart's
namespace must be one that only administrators write to.
*/}}
{{- define "imperator-dispatcher.checkNamespace" -}}
{{- $namespace := include "imperator-dispatcher.namespace" . -}}
{{- if or (gt (len $namespace) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $namespace)) -}}
{{- fail (printf "namespace %q (helm -n, or namespaceOverride) is not a namespace name: lower-case letters, digits and '-', at most 63" $namespace) -}}
{{- end -}}
{{- $legacy := "imperator-system" -}}
{{- if ne (include "imperator-dispatcher.namespace" .) $legacy -}}
{{- range $ref := include "imperator-dispatcher.releaseObjects" . | fromJsonArray -}}
{{- $obj := lookup (index $ref 0) (index $ref 1) $legacy (index $ref 2) -}}
{{- if and $obj (eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $obj) $.Release.Name) (eq (dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $obj) $.Release.Namespace) -}}
{{- fail (printf "objects of this release live in %s (%s %s of release %s/%s): pass --set namespaceOverride=%s (docs/upgrading.md)" $legacy (index $ref 1) (index $ref 2) $.Release.Namespace $.Release.Name $legacy) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if has $namespace (list "default" "kube-system" "kube-public" "kube-node-lease") -}}
{{- fail (printf "namespace %q is shared: install into a namespace of its own that only administrators write to (helm install -n imperator-system --create-namespace, or --set namespaceOverride=imperator-system): %s" $namespace "its Secrets hold the dispatcher's client key for the hub") -}}
{{- end -}}
{{- end }}

{{/*
Labels of every object: the kustomize base's part-of label and Helm's
release labels. Selectors use app.kubernetes.io/name alone, as the kustomize
base does, so that a dispatcher installed with kustomize can move to the chart.
*/}}
{{- define "imperator-dispatcher.labels" -}}
app.kubernetes.io/part-of: imperator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount the dispatcher's pods run as: serviceAccount.name, else
imperator-dispatcher. Bindings name it.
*/}}
{{- define "imperator-dispatcher.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "imperator-dispatcher" -}}
{{- end }}

{{/*
nameOverride and fullnameOverride are accepted only empty: the objects'
names are fixed (the dispatcher's Lease imperator-dispatcher, the roles its
bindings name, the kustomize base's names), so a renamed object would be
one nobody uses. One release per cluster.
*/}}
{{- define "imperator-dispatcher.checkNames" -}}
{{- range $key := list "nameOverride" "fullnameOverride" }}
{{- if index $.Values $key }}
{{- fail (printf "%s=%q: the chart's object names cannot be changed (the dispatcher's Lease and its bindings name them); install one release per cluster and leave %s empty" $key (index $.Values $key) $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
imperator-dispatcher.manifests decodes the generated multi-document YAML file
.file of files/ (copied there by make generate from deploy/dispatcher) into a JSON
list of its objects; use it with fromJsonArray:
  include "imperator-dispatcher.manifests" (dict "Files" .Files "file" "files/rbac/role.yaml") | fromJsonArray
A missing file or a document that does not parse fails the render with the
file's name.
*/}}
{{- define "imperator-dispatcher.manifests" -}}
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
sets itself (POD_NAMESPACE) fails the render naming it.
*/}}
{{- define "imperator-dispatcher.extraEnv" -}}
{{- $reserved := list "POD_NAMESPACE" -}}
{{- $vars := list -}}
{{- range $name := keys .Values.env | sortAlpha -}}
{{- $vars = append $vars (dict "name" $name "value" (toString (index $.Values.env $name))) -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- $vars = append $vars . -}}
{{- end -}}
{{- range $vars -}}
{{- if has .name $reserved -}}
{{- fail (printf "env/extraEnv: %s is set by the chart itself (POD_NAMESPACE); choose another name" .name) -}}
{{- end -}}
{{- end -}}
{{- with $vars -}}
{{- toYaml . -}}
{{- end -}}
{{- end }}

{{/*
The objects checkNamespace looks for, [apiVersion, kind, name]: what every
release of this chart has.
*/}}
{{- define "imperator-dispatcher.releaseObjects" -}}
{{- toJson (list (list "apps/v1" "Deployment" "imperator-dispatcher") (list "rbac.authorization.k8s.io/v1" "RoleBinding" "imperator-dispatcher")) -}}
{{- end }}

{{/*
The hub's query API the dispatcher asks: hub.address, else the hub's Service
in the dispatcher's namespace (both charts installed into one namespace of
a manager cluster that is also the hub cluster).
*/}}
{{- define "imperator-dispatcher.hubAddress" -}}
{{- .Values.hub.address | default (printf "imperator-hub.%s.svc:9443" (include "imperator-dispatcher.namespace" .)) -}}
{{- end }}

{{/*
The hub's namespace, for the commands NOTES prints: the one hubAddress names
when it is a hub Service's in-cluster name (imperator-hub.NAMESPACE.svc), else
a placeholder to fill in.
*/}}
{{- define "imperator-dispatcher.hubNamespace" -}}
{{- $address := include "imperator-dispatcher.hubAddress" . -}}
{{- $pattern := "^imperator-hub\\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\\.svc(\\.cluster\\.local)?(:[0-9]+)?$" -}}
{{- if regexMatch $pattern $address -}}
{{- regexReplaceAll $pattern $address "${1}" -}}
{{- else -}}
HUB_NAMESPACE
{{- end -}}
{{- end }}

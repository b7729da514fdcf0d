{{/*
The namespace every namespaced object goes into: namespaceOverride, else the
release's namespace (helm install -n). The generated RBAC, webhook
configurations and admission policies of files/ name imperator-system, as the
kustomize bases install them; the templates write this namespace into them.
*/}}
{{- define "imperator-spoke.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end }}

{{/*
Refuses a release whose objects the chart of v0.1.0 put into imperator-system
while Helm recorded the release in another namespace (helm install without
-n imperator-system): upgraded as it is, the chart would move the agent into
the release's namespace. Only objects this very release owns count (Helm's
release-name and release-namespace annotations); helm template, which looks
nothing up, renders on.

It also refuses a namespace that is not a namespace name (it is written
into CEL and JSON) and the shared ones (default, kube-*): the chart's
namespace must be one that only administrators write to.
*/}}
{{- define "imperator-spoke.checkNamespace" -}}
{{- $namespace := include "imperator-spoke.namespace" . -}}
{{- if or (gt (len $namespace) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $namespace)) -}}
{{- fail (printf "namespace %q (helm -n, or namespaceOverride) is not a namespace name: lower-case letters, digits and '-', at most 63" $namespace) -}}
{{- end -}}
{{- $legacy := "imperator-system" -}}
{{- if ne (include "imperator-spoke.namespace" .) $legacy -}}
{{- range $ref := include "imperator-spoke.releaseObjects" . | fromJsonArray -}}
{{- $obj := lookup (index $ref 0) (index $ref 1) $legacy (index $ref 2) -}}
{{- if and $obj (eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $obj) $.Release.Name) (eq (dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $obj) $.Release.Namespace) -}}
{{- fail (printf "objects of this release live in %s (%s %s of release %s/%s): pass --set namespaceOverride=%s (docs/upgrading.md)" $legacy (index $ref 1) (index $ref 2) $.Release.Namespace $.Release.Name $legacy) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if has $namespace (list "default" "kube-system" "kube-public" "kube-node-lease") -}}
{{- fail (printf "namespace %q is shared: install into a namespace of its own that only administrators write to (helm install -n imperator-system --create-namespace, or --set namespaceOverride=imperator-system): %s" $namespace "the admission policies trust the agent's namespace (a pod created there with the reservation label may stand on pool nodes) and its Secrets hold the agent's credentials") -}}
{{- end -}}
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
one nobody uses. One release per cluster.
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

{{/*
The objects checkNamespace looks for, [apiVersion, kind, name]: what every
release of this chart has, in any hosted.mode.
*/}}
{{- define "imperator-spoke.releaseObjects" -}}
{{- toJson (list (list "apps/v1" "Deployment" "imperator-spoke") (list "apps/v1" "Deployment" "imperator-spoke-hosted") (list "rbac.authorization.k8s.io/v1" "RoleBinding" "imperator-spoke")) -}}
{{- end }}

{{/*
imperator-spoke.policyInNamespace returns, as JSON, the admission policy
.obj of files/policy with the agent's namespace and identity of .root
written into its CEL in place of deploy/spoke's: the quoted username
'system:serviceaccount:imperator-system:imperator-spoke' (the ServiceAccount
pool-guests-only lets through) and the quoted namespace literal
'imperator-system' (the namespace the policies leave alone, as the webhook
does, and where reservations live). Only these exact quoted literals change:
text that merely contains imperator-system stays as it is.
*/}}
{{- define "imperator-spoke.policyInNamespace" -}}
{{- $namespace := include "imperator-spoke.namespace" .root -}}
{{- $user := printf "'system:serviceaccount:%s:%s'" $namespace (include "imperator-spoke.serviceAccountName" .root) -}}
{{- toJson .obj | replace "'system:serviceaccount:imperator-system:imperator-spoke'" $user | replace "'imperator-system'" (printf "'%s'" $namespace) -}}
{{- end }}

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

{{/*
imperator-spoke.validateHosted fails the render, naming the value, when the
hosted values contradict each other (README, Hosted mode).
*/}}
{{- define "imperator-spoke.validateHosted" -}}
{{- $hosted := .Values.hosted -}}
{{- if eq $hosted.mode "management" -}}
{{- if not $hosted.webhookURL -}}
{{- fail "hosted.webhookURL: required with hosted.mode=management (the https URL at which the members' API servers reach the agent's webhooks)" -}}
{{- end -}}
{{- if not (hasPrefix "https://" $hosted.webhookURL) -}}
{{- fail (printf "hosted.webhookURL %q: must be an https:// URL" $hosted.webhookURL) -}}
{{- end -}}
{{- if or .Values.hub.clusterName .Values.hub.joinToken -}}
{{- fail "hub.clusterName, hub.joinToken: not with hosted.mode=management (each member's name and join token are in its Secret)" -}}
{{- end -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- fail "webhook.certManager.enabled: not supported with hosted.mode=management (the agent puts its own CA bundle into every member's webhook configurations)" -}}
{{- end -}}
{{- else if eq $hosted.mode "member" -}}
{{- if or .Values.hub.address .Values.hub.ca .Values.hub.joinToken .Values.hub.existingSecret -}}
{{- fail "hub: leave empty with hosted.mode=member (the hosted agent joins for the member with the token in the member's Secret in the management cluster)" -}}
{{- end -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- fail "webhook.certManager.enabled: not with hosted.mode=member (no agent runs in a member)" -}}
{{- end -}}
{{- end -}}
{{- if and (ne $hosted.mode "management") (or $hosted.webhookURL $hosted.webhookHosts $hosted.kubeconfigNamespace $hosted.loadBalancerSourceRanges) -}}
{{- fail "hosted.webhookURL, webhookHosts, kubeconfigNamespace, loadBalancerSourceRanges: only with hosted.mode=management" -}}
{{- end -}}
{{- end }}

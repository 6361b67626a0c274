{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "svcplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the prefix of every object name. A release called "svcplane" gives
"svcplane"; any other release name gets "<release>-svcplane" unless it already
contains the chart name.
*/}}
{{- define "svcplane.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "svcplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: name and instance only (never version or chart, which change
on upgrade and would orphan the ReplicaSet).
*/}}
{{- define "svcplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svcplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "svcplane.labels" -}}
helm.sh/chart: {{ include "svcplane.chart" . }}
{{ include "svcplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: svcplane
{{- end }}

{{/*
Labels of the install check's objects: their own app.kubernetes.io/name, so the check
pods are never selected by the Deployment's Services, PDB or NetworkPolicy.
*/}}
{{- define "svcplane.checkLabels" -}}
helm.sh/chart: {{ include "svcplane.chart" . }}
app.kubernetes.io/name: {{ printf "%s-check" (include "svcplane.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: svcplane
app.kubernetes.io/component: check
{{- end }}

{{- define "svcplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "svcplane.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "svcplane.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The leader-election Lease name (--leader-elect-resource-name). */}}
{{- define "svcplane.leaseName" -}}
{{- default (include "svcplane.fullname" .) .Values.leaderElection.resourceName }}
{{- end }}

{{- define "svcplane.webhookServiceName" -}}
{{- printf "%s-webhook" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "svcplane.metricsServiceName" -}}
{{- printf "%s-metrics" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Secret holding the webhook's serving certificate (tls.crt, tls.key). */}}
{{- define "svcplane.webhookSecretName" -}}
{{- if eq .Values.webhook.certMode "secret" }}
{{- required "webhook.existingSecret is required when webhook.certMode is secret" .Values.webhook.existingSecret }}
{{- else if eq .Values.webhook.certMode "self" }}
{{- printf "%s-webhook-certs" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-webhook-tls" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Name of the install check's ServiceAccount, Role and RoleBinding. */}}
{{- define "svcplane.checkName" -}}
{{- printf "%s-check" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether anything runs `svcplane check` (the hook Job or the helm test Pod: the test always exists with the webhook). */}}
{{- define "svcplane.checkEnabled" -}}
{{- if .Values.webhook.enabled }}true{{ end }}
{{- end }}

{{/*
activeDeadlineSeconds of the check: its timeout (a Go duration: h, m, s parts) plus
one minute to pull the image and start. With the default timeout (2m) a check that
cannot even start (its image, svcplane's own, cannot be pulled) fails at 3 min,
before Helm's own 5 min timeout, so Helm reports the Job and not a bare timeout.
*/}}
{{- define "svcplane.checkDeadline" -}}
{{- $t := .Values.webhook.check.timeout }}
{{- $secs := 0 }}
{{- range $part := regexFindAll "[0-9]+(h|m|s)" $t -1 }}
{{- $n := int (regexFind "[0-9]+" $part) }}
{{- if hasSuffix "h" $part }}{{ $secs = add $secs (mul $n 3600) }}
{{- else if hasSuffix "m" $part }}{{ $secs = add $secs (mul $n 60) }}
{{- else }}{{ $secs = add $secs $n }}
{{- end }}
{{- end }}
{{- add $secs 60 }}
{{- end }}

{{/*
The container running `svcplane check` (hook Job and helm test Pod). Called with the
root context.
*/}}
{{- define "svcplane.checkContainer" -}}
- name: check
  image: {{ include "svcplane.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  terminationMessagePolicy: FallbackToLogsOnError
  args:
    - check
    - --namespace={{ .Release.Namespace }}
    - --timeout={{ .Values.webhook.check.timeout }}
    - --interval=2s
    - --pods-selector={{ include "svcplane.selectorLabels" . | replace ": " "=" | replace "\n" "," }}
    {{- if .Values.leaderElection.enabled }}
    - --leader-lease={{ include "svcplane.leaseName" . }}
    {{- end }}
  env:
    - name: RUST_LOG
      value: warn
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 64Mi
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
{{- end }}

{{/* cert-manager Certificate of the serving cert, "<namespace>/<name>" for inject-ca-from. */}}
{{- define "svcplane.certManagerCertificateName" -}}
{{- printf "%s-webhook" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The namespaces the namespaceSelector excludes by name: excludeNamespaces minus the
release namespace (that one is excluded by a matchCondition instead, which lets the
install check's probes through).
*/}}
{{- define "svcplane.excludedByName" -}}
{{- $out := list }}
{{- range .Values.webhook.excludeNamespaces }}
{{- if ne . $.Release.Namespace }}
{{- $out = append $out . }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The fields every webhook entry shares (both configurations). Called with the
root context.
*/}}
{{- define "svcplane.webhookCommon" -}}
{{- $byName := include "svcplane.excludedByName" . | fromJsonArray }}
admissionReviewVersions: ["v1"]
sideEffects: NoneOnDryRun
matchPolicy: Equivalent
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
failurePolicy: {{ .Values.webhook.failurePolicy }}
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["services"]
    scope: Namespaced
{{- if or $byName .Values.webhook.namespaceOptOutLabel }}
namespaceSelector:
  matchExpressions:
    {{- if $byName }}
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range $byName }}
        - {{ . | quote }}
        {{- end }}
    {{- end }}
    {{- if .Values.webhook.namespaceOptOutLabel }}
    - key: {{ .Values.webhook.namespaceOptOutLabel | quote }}
      operator: DoesNotExist
    {{- end }}
{{- else }}
namespaceSelector: {}
{{- end }}
{{- if .Values.webhook.optOutLabel }}
objectSelector:
  matchExpressions:
    - key: {{ .Values.webhook.optOutLabel | quote }}
      operator: DoesNotExist
{{- else }}
objectSelector: {}
{{- end }}
matchConditions:
  # The release namespace is never reviewed: svcplane's own Services (webhook,
  # metrics) can always be written, so a webhook that is down never blocks the
  # `helm upgrade` that would fix it. Only the install check's dry-run probes
  # (label svcplane.io/probe) are sent from there.
  - name: exclude-release-namespace
    expression: 'request.namespace != {{ .Release.Namespace | quote }} || (has(object.metadata.labels) && "svcplane.io/probe" in object.metadata.labels)'
{{- end }}

{{/*
clientConfig of one webhook entry. Called with (dict "root" $ "path" "/..." "caBundle" "...").
*/}}
{{- define "svcplane.webhookClientConfig" -}}
clientConfig:
  service:
    name: {{ include "svcplane.webhookServiceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.webhook.service.port }}
  {{- if .caBundle }}
  caBundle: {{ .caBundle }}
  {{- end }}
{{- end }}

{{/*
"true" when `svcplane run --controllers=<.controllers>` runs the controller known
as any of .names (svcplane's name and kube-controller-manager's), else empty:
`-name` switches it off, `*` switches on the controllers that are on by default
(.defaultOn). The same rule as the binary's --controllers, so the RBAC below
grants exactly what the running controllers use (tests/chart/test_chart.py
compares it with `svcplane rbac`).
*/}}
{{- define "svcplane.runs" -}}
{{- $on := false -}}
{{- $off := false -}}
{{- range .controllers -}}
{{- if has . $.names }}{{ $on = true }}{{ end -}}
{{- if and (eq . "*") $.defaultOn }}{{ $on = true }}{{ end -}}
{{- if and (hasPrefix "-" .) (has (trimPrefix "-" .) $.names) }}{{ $off = true }}{{ end -}}
{{- end -}}
{{- if and $on (not $off) }}true{{ end -}}
{{- end -}}

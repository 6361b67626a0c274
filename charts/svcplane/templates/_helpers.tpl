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
{{- else }}
{{- printf "%s-webhook-tls" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* cert-manager Certificate of the serving cert, "<namespace>/<name>" for inject-ca-from. */}}
{{- define "svcplane.certManagerCertificateName" -}}
{{- printf "%s-webhook" (include "svcplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fields every webhook entry shares (both configurations). Called with the
root context.
*/}}
{{- define "svcplane.webhookCommon" -}}
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
{{- if .Values.webhook.excludeNamespaces }}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range .Values.webhook.excludeNamespaces }}
        - {{ . | quote }}
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
  # svcplane never reviews its own webhook Service: a webhook that is down can
  # then never block the `helm upgrade` that would fix it.
  - name: exclude-svcplane-webhook-service
    expression: '!(request.namespace == {{ .Release.Namespace | quote }} && request.name == {{ include "svcplane.webhookServiceName" . | quote }})'
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

{{- define "kwok-pools.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "kwok-pools.labels" -}}
app.kubernetes.io/name: kwok-pools
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "kwok-pools.selector" -}}
app.kubernetes.io/name: kwok-pools
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kwok-pools.certSecret" -}}
{{- default (printf "%s-webhook-tls" (include "kwok-pools.name" .)) .Values.webhook.secretName -}}
{{- end -}}

{{/* The operator's --instance: the release name, so the webhook configuration and Leases are the release's own. */}}
{{- define "kwok-pools.instance" -}}
{{- include "kwok-pools.name" . -}}
{{- end -}}

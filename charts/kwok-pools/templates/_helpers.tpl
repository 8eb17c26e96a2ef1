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

{{/* The operator's --instance: `instance` (default kwok-pools). A second install sets its own:
     it then reconciles the pools labelled pools.kwok.x-k8s.io/instance=<instance>, the default
     instance those without the label, and each has webhook configurations of its own. */}}
{{- define "kwok-pools.instance" -}}
{{- default "kwok-pools" .Values.instance -}}
{{- end -}}

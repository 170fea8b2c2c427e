{{/* Names and labels shared by every object of the chart. */}}

{{- define "ahj.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release's object name: the release name when it already contains the chart name (the usual
`helm install ascend-hybrid-operator …`), else "<release>-<chart>"; 63 characters at most (a DNS label).
*/}}
{{- define "ahj.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "ahj.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ahj.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ahj.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ahj.labels" -}}
{{ include "ahj.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ahj.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* ServiceMonitor and PrometheusRule read the metrics Service; without it they would select nothing. */}}
{{- define "ahj.requireMetrics" -}}
{{- if not .Values.metrics.enabled -}}
{{- fail "serviceMonitor.enabled and prometheusRule.enabled need metrics.enabled=true" -}}
{{- end -}}
{{- end -}}

{{/*
NetworkPolicyPeers allowed to the trainers' metrics port (--metrics-peers, one line of JSON): the operator's own
pods (it reads progress there) and Prometheus.
*/}}
{{- define "ahj.metricsPeers" -}}
{{- $operator := dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace)) "podSelector" (dict "matchLabels" (fromYaml (include "ahj.selectorLabels" .))) -}}
{{- $prometheus := dict "namespaceSelector" .Values.networkPolicy.prometheus.namespaceSelector "podSelector" .Values.networkPolicy.prometheus.podSelector -}}
{{- list $operator $prometheus | toJson -}}
{{- end -}}

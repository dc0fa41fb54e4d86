{{/* The chart name, or nameOverride. */}}
{{- define "draingate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: the Service, the Deployment, the webhook configuration and the
cluster-wide RBAC objects are named after it. Release "draingate" gives
"draingate", the name the agent's built-in server URL expects.
*/}}
{{- define "draingate.fullname" -}}
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

{{/* The metrics Service's name: a DNS label, so at most 63 characters. */}}
{{- define "draingate.metricsName" -}}
{{- printf "%s-metrics" (include "draingate.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* The Secret that holds the webhook's serving certificate. */}}
{{- define "draingate.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "draingate.fullname" .) }}
{{- end }}

{{- define "draingate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "draingate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "draingate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "draingate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "draingate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "draingate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image by digest when one is given (it wins over the tag), else by tag. */}}
{{- define "draingate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "draingate.agentImage" -}}
{{- if .Values.agent.image.digest }}
{{- printf "%s@%s" .Values.agent.image.repository .Values.agent.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.agent.image.repository (default .Chart.AppVersion .Values.agent.image.tag) }}
{{- end }}
{{- end }}

{{/* The URL injected agents ask: agent.server, else this release's Service. */}}
{{- define "draingate.agentServer" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "draingate.fullname" .) .Release.Namespace .Values.ports.http) .Values.agent.server }}
{{- end }}

{{/*
Settings the server would reject at start (or the API server at install):
fail the render instead, naming the value.
*/}}
{{- define "draingate.validate" -}}
{{- $fp := .Values.webhook.failurePolicy | toString }}
{{- if not (has $fp (list "Ignore" "Fail")) }}
{{- fail (printf "webhook.failurePolicy must be Ignore or Fail, got %q" $fp) }}
{{- end }}
{{- $timeout := .Values.webhook.timeoutSeconds | int }}
{{- if or (lt $timeout 1) (gt $timeout 10) }}
{{- fail (printf "webhook.timeoutSeconds must be 1 to 10, got %v" .Values.webhook.timeoutSeconds) }}
{{- end }}
{{- $lf := .Values.logFormat | toString }}
{{- if not (has $lf (list "text" "json")) }}
{{- fail (printf "logFormat must be text or json, got %q" $lf) }}
{{- end }}
{{- $rate := .Values.aws.rate | float64 }}
{{- if or (le $rate 0.0) (gt $rate 100.0) }}
{{- fail (printf "aws.rate must be more than 0 and at most 100 calls/s per replica, got %v" .Values.aws.rate) }}
{{- end }}
{{- if lt (.Values.aws.burst | int) 1 }}
{{- fail (printf "aws.burst must be at least 1, got %v" .Values.aws.burst) }}
{{- end }}
{{- end }}

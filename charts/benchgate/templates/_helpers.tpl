{{/*
The chart name, overridable with nameOverride. 63 characters: the limit of a label value.
*/}}
{{- define "benchgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: the release name, plus the chart name unless the release name
already contains it ("benchgate" installs as "benchgate", not "benchgate-benchgate").
*/}}
{{- define "benchgate.fullname" -}}
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

{{/*
Chart name and version for the helm.sh/chart label ("+" is not allowed in label values).
*/}}
{{- define "benchgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource.
*/}}
{{- define "benchgate.labels" -}}
helm.sh/chart: {{ include "benchgate.chart" . }}
{{ include "benchgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: benchgate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The Deployment's selector: immutable once installed, so it holds only labels that never change.
*/}}
{{- define "benchgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "benchgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The controller's ServiceAccount: the release's full name when the chart creates it, otherwise the
named one, or the namespace's "default".
*/}}
{{- define "benchgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "benchgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The controller image: by digest when image.digest is set (what was verified is what runs), else by
tag, which defaults to the chart's appVersion (benchgate's version).
*/}}
{{- define "benchgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The port of /metrics and /readyz, 0 when not served.
*/}}
{{- define "benchgate.metricsPort" -}}
{{- if .Values.metrics.enabled }}{{ .Values.metrics.port }}{{ else }}0{{ end }}
{{- end }}

{{/*
The namespace the controller watches: the release's own in namespaced-RBAC mode (a Role grants
nothing elsewhere), empty for every namespace.
*/}}
{{- define "benchgate.watchNamespace" -}}
{{- if .Values.rbac.namespaced }}{{ .Release.Namespace }}{{ end }}
{{- end }}

{{/*
The KFP endpoint, which the controller cannot run without. Checked here rather than only in the
schema so that a missing value names itself in the install error.
*/}}
{{- define "benchgate.kfpHost" -}}
{{- required "kfp.host is required: the KFP API endpoint the controller submits runs to, e.g. --set kfp.host=http://ml-pipeline.kubeflow:8888" .Values.kfp.host }}
{{- end }}

{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "hourglass.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name, plus the chart name unless it already holds it. */}}
{{- define "hourglass.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "hourglass.labels" -}}
app.kubernetes.io/name: {{ include "hourglass.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hourglass
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "scheduler"). */}}
{{- define "hourglass.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hourglass.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image reference. */}}
{{- define "hourglass.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The log arguments every service takes: --log kafka://BOOTSTRAP [--topic-prefix P], or in embedded mode
--log <the log volume's mount path>. */}}
{{- define "hourglass.logArgs" -}}
{{- if eq .Values.log.mode "embedded" -}}
- --log
- {{ .Values.log.path | quote }}
{{- else -}}
- --log
- {{ printf "kafka://%s" (required "kafka.bootstrap is required (HOST:PORT of the Kafka brokers)" .Values.kafka.bootstrap) | quote }}
{{- with .Values.kafka.topicPrefix }}
- --topic-prefix
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The fair-share settings file both the scheduler and fairshare read (--fairshare-config): the
timeBasedFairShare fields (fairshare/settings.py), plus `prometheus:` when a URL is set. */}}
{{- define "hourglass.fairshareConfig" -}}
{{- if .Values.fairshare.config -}}
{{- fail "fairshare.config has moved to the top-level timeBasedFairShare block (one setting for the scheduler and fairshare): e.g. --set timeBasedFairShare.k_value=2" -}}
{{- end -}}
{{- $cfg := deepCopy (default dict .Values.timeBasedFairShare) -}}
{{- if .Values.prometheus.url -}}
{{- $prom := merge (dict "url" .Values.prometheus.url) (deepCopy (default dict .Values.prometheus.settings)) -}}
{{- $_ := set $cfg "prometheus" $prom -}}
{{- end -}}
{{- if $cfg }}{{ toYaml $cfg }}{{ else }}{}{{ end -}}
{{- end -}}

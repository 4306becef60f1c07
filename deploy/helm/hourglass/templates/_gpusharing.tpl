{{/* The binder's GPU-sharing flags (docs/gpu-sharing.md); nothing when gpuSharing is off. */}}
{{- define "hourglass.binderGpuSharingArgs" -}}
{{- if .Values.gpuSharing.enabled -}}
- --gpu-sharing
- --reservation-namespace
- {{ .Values.gpuSharing.reservationNamespace | quote }}
- --reservation-image
- {{ include "hourglass.image" . | quote }}
- --reservation-service-account
- {{ printf "%s-reservation" (include "hourglass.fullname" .) | quote }}
- --reservation-timeout
- {{ .Values.gpuSharing.reservationTimeoutSeconds | quote }}
{{- end -}}
{{- end -}}

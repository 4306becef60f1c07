{{- /*
One service's container, the same in both log modes; call with (dict "root" $ "c" $component "embedded" bool).
In embedded mode the containers share one pod, so each metrics port gets a name of its own, every
container mounts the log volume, and the API token is mounted only into the containers that call the API.
*/ -}}
{{- define "hourglass.container" -}}
{{- $root := .root -}}
{{- $c := .c -}}
{{- $v := $c.values -}}
{{- $le := $root.Values.leaderElection -}}
{{- $port := ternary (printf "m-%s" $c.component) "metrics" .embedded -}}
- name: {{ $c.component }}
  image: {{ include "hourglass.image" $root | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command: ["hourglass"]
  args:
    - {{ $c.subcommand }}
    {{- include "hourglass.logArgs" $root | nindent 4 }}
    {{- if eq $c.component "ingest" }}
    - --scheduler-name
    - {{ $root.Values.schedulerName | quote }}
    {{- end }}
    {{- if and (has $c.component (list "scheduler" "binder" "fairshare")) $v.metrics.enabled }}
    # All interfaces: Prometheus scrapes the pod IP through the Service.
    - --metrics-host
    - "0.0.0.0"
    - --metrics-port
    - {{ $v.metrics.port | quote }}
    {{- end }}
    {{- if eq $c.component "fairshare" }}
    - --source
    - {{ ternary "prometheus" "eventlog" (not (empty $root.Values.prometheus.url)) }}
    {{- end }}
    {{- if has $c.component (list "scheduler" "fairshare") }}
    # The one fair-share setting (values: timeBasedFairShare), the same file for both services.
    - --fairshare-config
    - /etc/hourglass/fairshare.yaml
    {{- end }}
    {{- if and (eq $c.component "binder") $root.Values.gpuSharing.enabled }}
    {{- include "hourglass.binderGpuSharingArgs" $root | nindent 4 }}
    {{- end }}
    {{- if $c.shard }}
    {{- if hasKey $c.shard "nodePool" }}
    - --node-pool
    - {{ $c.shard.nodePool | quote }}
    {{- end }}
    {{- end }}
    {{- if and $le.enabled (has $c.component (list "scheduler" "binder")) }}
    # Standby replicas: only the holder of the Lease works (docs/deploy.md).
    - --leader-elect
    - --lease-duration
    - {{ $le.leaseDuration | quote }}
    - --lease-renew-deadline
    - {{ $le.renewDeadline | quote }}
    - --lease-retry-period
    - {{ $le.retryPeriod | quote }}
    {{- end }}
    {{- range $v.extraArgs }}
    - {{ . | quote }}
    {{- end }}
    {{- if and $c.shard (eq $c.component "scheduler") }}
    {{- range $c.shard.extraArgs }}
    - {{ . | quote }}
    {{- end }}
    {{- end }}
  env:
    - name: PYTHONUNBUFFERED
      value: "1"
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- with $v.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if and (has $c.component (list "scheduler" "binder" "fairshare")) $v.metrics.enabled }}
  ports:
    - name: {{ $port }}
      containerPort: {{ $v.metrics.port }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /metrics
      port: {{ $port }}
    periodSeconds: 10
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    # The root filesystem is read-only; Python and the Kafka client may still want a scratch dir.
    - name: tmp
      mountPath: /tmp
    {{- if has $c.component (list "scheduler" "fairshare") }}
    - name: config
      mountPath: /etc/hourglass
      readOnly: true
    {{- end }}
    {{- if .embedded }}
    - name: log
      mountPath: {{ $root.Values.log.path }}
    {{- if $c.token }}
    - name: kube-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- end }}
    {{- end }}
{{- end -}}

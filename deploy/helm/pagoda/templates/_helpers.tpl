{{- define "pagoda.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "pagoda.workersName" -}}
{{- printf "%s-worker" (include "pagoda.fullname" .) -}}
{{- end -}}

{{- define "pagoda.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pagoda.serverSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Every pod of the release, servers and workers (the PodDisruptionBudget). */}}
{{- define "pagoda.releaseSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pagoda.workerSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{/* Tensor-parallel size 1: the worker is a sidecar in the server's pod. */}}
{{- define "pagoda.sidecar" -}}
{{- if eq (int .Values.tensorParallelSize) 1 }}true{{ end -}}
{{- end -}}

{{/* The StatefulSet of replica N's workers: <fullname>-worker-N. */}}
{{- define "pagoda.replicaWorkersName" -}}
{{- printf "%s-%d" (include "pagoda.workersName" .root) (int .replica) -}}
{{- end -}}

{{/* The server's workers, rank order. A sidecar on loopback; else the pods
     of its own replica's StatefulSet, <fullname>-worker-<replica>-<rank>,
     by their stable names under the headless Service. $(PAGODA_REPLICA) is
     the server pod's StatefulSet ordinal (env from the pod-index label). */}}
{{- define "pagoda.workerAddresses" -}}
{{- if include "pagoda.sidecar" . -}}
{{- printf "127.0.0.1:%d" (int .Values.worker.port) -}}
{{- else -}}
{{- $name := include "pagoda.workersName" . -}}
{{- $addresses := list -}}
{{- range $rank := until (int .Values.tensorParallelSize) -}}
{{- $addresses = append $addresses (printf "%s-$(PAGODA_REPLICA)-%d.%s.%s.svc.%s:%d" $name $rank $name $.Release.Namespace $.Values.clusterDomain (int $.Values.worker.port)) -}}
{{- end -}}
{{- join "," $addresses -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of the server and worker pods. */}}
{{- define "pagoda.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pagoda.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* What every server and worker pod spec starts with: its account, no
     API token (Pagoda calls no Kubernetes API, so a token would only be
     something to steal), and the registry credentials. */}}
{{- define "pagoda.podIdentity" -}}
serviceAccountName: {{ include "pagoda.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations and affinity of a pod, from .placement (the
     server's or the worker's values). */}}
{{- define "pagoda.placement" -}}
{{- with .placement.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .placement.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .placement.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A StatefulSet ordinal (apps.kubernetes.io/pod-index, Kubernetes 1.28+). */}}
{{- define "pagoda.podIndexEnv" -}}
valueFrom: {fieldRef: {fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}
{{- end -}}

{{/* The worker container: a sidecar (rank 0) or rank = pod ordinal. */}}
{{- define "pagoda.workerContainer" -}}
{{- $ := .root -}}
- name: worker
  image: "{{ $.Values.image.repository }}:{{ $.Values.image.tag }}"
  imagePullPolicy: {{ $.Values.image.pullPolicy }}
  {{- if .sidecar }}
  # A native sidecar: started (listening) before the server, stopped after
  # the server has drained.
  restartPolicy: Always
  {{- end }}
  command: ["pagoda-worker"]
  args:
    {{- if .sidecar }}
    # Loopback alone: there the worker checks the secret from a call's
    # headers before reading its message (gRPC's local credentials), and
    # the kubelet probes it from inside the pod (pagoda-cli health).
    - --listen=127.0.0.1:{{ $.Values.worker.port }}
    - --rank=0
    {{- else }}
    # On the pod IP, for its replica's server in another pod and for the
    # probes; only that server may call it (NetworkPolicy, mutual TLS
    # unless workerTls.enabled is false, and the secret on every call).
    - --listen=0.0.0.0:{{ $.Values.worker.port }}
    - --rank=$(PAGODA_RANK)
    # Tensor-parallel peers reach this worker's collectives at its pod IP.
    - --collective-host=$(POD_IP)
    {{- if include "pagoda.workerTls" $ }}
    # Mutual TLS: only a server with a certificate from the chart's CA
    # connects, and the secret is checked before a call's message is read.
    - --ssl-certfile={{ include "pagoda.workerTlsDir" $ }}/worker.crt
    - --ssl-keyfile={{ include "pagoda.workerTlsDir" $ }}/worker.key
    - --ssl-ca-certs={{ include "pagoda.workerTlsDir" $ }}/ca.crt
    {{- end }}
    {{- end }}
    - --secret-file=/etc/pagoda/worker-secret/secret
    {{- if $.Values.worker.metricsPort }}
    # /metrics on the pod IP (also at size 1, where --listen is loopback),
    # for Prometheus; it shows counts only, never a secret.
    - --metrics-port={{ $.Values.worker.metricsPort }}
    - --metrics-host=0.0.0.0
    {{- end }}
  env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    {{- if not .sidecar }}
    - name: PAGODA_RANK
      {{- include "pagoda.podIndexEnv" . | nindent 6 }}
    {{- end }}
  {{- if or (not .sidecar) $.Values.worker.metricsPort }}
  ports:
    {{- if not .sidecar }}
    - {name: worker, containerPort: {{ $.Values.worker.port }}}
    {{- end }}
    {{- if $.Values.worker.metricsPort }}
    - {name: worker-metrics, containerPort: {{ $.Values.worker.metricsPort }}}
    {{- end }}
  {{- end }}
  {{- if .sidecar }}
  {{- $probe := printf "exec: {command: [pagoda-cli, --server=127.0.0.1:%d, --timeout=2, health]}, timeoutSeconds: 3" (int $.Values.worker.port) }}
  startupProbe: { {{- $probe }}, periodSeconds: 1, failureThreshold: 120}
  livenessProbe: { {{- $probe }}, periodSeconds: 10, failureThreshold: 3}
  readinessProbe: { {{- $probe }}, periodSeconds: 5}
  {{- else if include "pagoda.workerTls" $ }}
  {{- $probe := include "pagoda.workerTlsProbe" $ }}
  startupProbe: { {{- $probe }}, periodSeconds: 1, failureThreshold: 120}
  livenessProbe: { {{- $probe }}, periodSeconds: 10, failureThreshold: 3}
  readinessProbe: { {{- $probe }}, periodSeconds: 5}
  {{- else }}
  startupProbe:
    grpc: {port: {{ $.Values.worker.port }}}
    periodSeconds: 1
    failureThreshold: 120
  livenessProbe:
    grpc: {port: {{ $.Values.worker.port }}}
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    grpc: {port: {{ $.Values.worker.port }}}
    periodSeconds: 5
  {{- end }}
  volumeMounts:
    {{- include "pagoda.modelMount" $ | nindent 4 }}
    {{- include "pagoda.loraMount" $ | nindent 4 }}
    {{- include "pagoda.workerSecretMount" $ | nindent 4 }}
    {{- if include "pagoda.workerTls" $ }}
    {{- include "pagoda.workerTlsMount" $ | nindent 4 }}
    {{- end }}
    {{- include "pagoda.tmpMount" $ | nindent 4 }}
  resources:
    {{- $resources := deepCopy $.Values.worker.resources }}
    {{- if eq $.Values.device "cuda" }}
    {{- $limits := default dict $resources.limits }}
    {{- $_ := set $limits "nvidia.com/gpu" 1 }}
    {{- $_ := set $resources "limits" $limits }}
    {{- end }}
    {{- toYaml $resources | nindent 4 }}
  securityContext:
    {{- include "pagoda.containerSecurity" $ | nindent 4 }}
{{- end -}}

{{- define "pagoda.topologySpread" -}}
{{- if .root.Values.topologySpread.enabled -}}
topologySpreadConstraints:
  - maxSkew: {{ .root.Values.topologySpread.maxSkew }}
    topologyKey: {{ .root.Values.topologySpread.topologyKey }}
    whenUnsatisfiable: {{ .root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- .selector | nindent 8 }}
{{- end }}
{{- end -}}

{{- define "pagoda.tmpVolume" -}}
- name: tmp
  emptyDir: {sizeLimit: {{ .Values.tmpSizeLimit }}}
{{- end -}}

{{- define "pagoda.tmpMount" -}}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{- define "pagoda.modelVolume" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required" .Values.model.pvc.claimName }}
    readOnly: true
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ required "model.hostPath.path is required" .Values.model.hostPath.path }}
    type: Directory
{{- else }}
{{- fail "model.source must be pvc or hostPath" }}
{{- end }}
{{- end -}}

{{- define "pagoda.modelMount" -}}
- name: model
  mountPath: /models/model
  readOnly: true
{{- if and (eq .Values.model.source "pvc") .Values.model.pvc.subPath }}
  subPath: {{ .Values.model.pvc.subPath }}
{{- end }}
{{- end -}}

{{- define "pagoda.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The secret every worker call carries: an existing Secret, or one this chart makes. */}}
{{- define "pagoda.workerSecretName" -}}
{{- default (printf "%s-worker-secret" (include "pagoda.fullname" .)) .Values.workerSecret.existingSecret -}}
{{- end -}}

{{- define "pagoda.workerSecretVolume" -}}
- name: worker-secret
  secret:
    secretName: {{ include "pagoda.workerSecretName" . }}
    defaultMode: 0400
{{- end -}}

{{- define "pagoda.workerSecretMount" -}}
- {name: worker-secret, mountPath: /etc/pagoda/worker-secret, readOnly: true}
{{- end -}}

{{/* Mutual TLS between a server and its workers: above tensor-parallel
     size 1 (workers on pod IPs) unless workerTls.enabled is false. */}}
{{- define "pagoda.workerTls" -}}
{{- if and (not (include "pagoda.sidecar" .)) .Values.workerTls.enabled }}true{{ end -}}
{{- end -}}

{{- define "pagoda.workerTlsSecretName" -}}
{{- default (printf "%s-worker-tls" (include "pagoda.fullname" .)) .Values.workerTls.existingSecret -}}
{{- end -}}

{{/* The name the workers' certificate carries and the server checks
     (--worker-ssl-server-name), whatever pod IP it dials. */}}
{{- define "pagoda.workerTlsServerName" -}}pagoda-worker{{- end -}}

{{- define "pagoda.workerTlsDir" -}}/etc/pagoda/worker-tls{{- end -}}

{{/* The TLS volume of a worker pod (its certificate and key, the CA) or of
     a server pod (its client certificate and key, the CA). */}}
{{- define "pagoda.workerTlsVolume" -}}
{{- $own := ternary "worker" "client" (eq .role "worker") -}}
- name: worker-tls
  secret:
    secretName: {{ include "pagoda.workerTlsSecretName" .root }}
    defaultMode: 0400
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: {{ $own }}.crt, path: {{ $own }}.crt}
      - {key: {{ $own }}.key, path: {{ $own }}.key}
{{- end -}}

{{- define "pagoda.workerTlsMount" -}}
- {name: worker-tls, mountPath: {{ include "pagoda.workerTlsDir" . }}, readOnly: true}
{{- end -}}

{{/* A TLS worker's probe: plain gRPC probes speak no TLS, so pagoda-cli
     asks grpc.health.v1 over the pod's loopback with the worker's own
     certificate (which the CA signed, as the worker requires). */}}
{{- define "pagoda.workerTlsProbe" -}}
{{- $dir := include "pagoda.workerTlsDir" . -}}
exec: {command: [pagoda-cli, "--server=127.0.0.1:{{ .Values.worker.port }}", "--ssl-ca-certs={{ $dir }}/ca.crt", "--ssl-certfile={{ $dir }}/worker.crt", "--ssl-keyfile={{ $dir }}/worker.key", --timeout=2, health]}, timeoutSeconds: 3
{{- end -}}

{{- /* LoRA (values lora.*): the adapters' volume, its read-only mount at
/models/lora (server and workers alike: both read adapter files), and the
server's flags. */ -}}
{{- define "pagoda.loraDir" -}}/models/lora{{- end -}}

{{- define "pagoda.loraVolume" -}}
{{- if .Values.lora.enabled }}
- name: lora
{{- if eq .Values.lora.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "lora.pvc.claimName is required" .Values.lora.pvc.claimName }}
    readOnly: true
{{- else if eq .Values.lora.source "hostPath" }}
  hostPath:
    path: {{ required "lora.hostPath.path is required" .Values.lora.hostPath.path }}
    type: Directory
{{- else }}
{{- fail "lora.source must be pvc or hostPath" }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "pagoda.loraMount" -}}
{{- if .Values.lora.enabled }}
- name: lora
  mountPath: {{ include "pagoda.loraDir" . }}
  readOnly: true
{{- if and (eq .Values.lora.source "pvc") .Values.lora.pvc.subPath }}
  subPath: {{ .Values.lora.pvc.subPath }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "pagoda.loraArgs" -}}
{{- if .Values.lora.enabled }}
{{- if ne .Values.device "cpu" }}
{{- fail "lora.enabled needs device: cpu (the CUDA worker has no LoRA kernels yet)" }}
{{- end }}
- --enable-lora
- --max-loras={{ .Values.lora.maxLoras }}
- --max-lora-rank={{ .Values.lora.maxLoraRank }}
{{- if .Values.lora.maxCpuLoras }}
- --max-cpu-loras={{ .Values.lora.maxCpuLoras }}
{{- end }}
{{- if .Values.lora.maxTrainableTokens }}
- --max-lora-trainable-tokens={{ .Values.lora.maxTrainableTokens }}
{{- end }}
{{- with .Values.lora.modules }}
{{- $modules := list }}
{{- range . }}
{{- $modules = append $modules (printf "%s=%s/%s" .name (include "pagoda.loraDir" $) (trimPrefix "/" .path)) }}
{{- end }}
- {{ printf "--lora-modules=%s" (join " " $modules) | quote }}
{{- end }}
{{- if .Values.lora.runtimeLoading }}
- --lora-dir={{ include "pagoda.loraDir" . }}
{{- end }}
{{- end }}
{{- end -}}

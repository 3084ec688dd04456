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

{{- define "pagoda.workerSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{/* The workers' stable DNS names, rank order: pod-N.headless-service. */}}
{{- define "pagoda.workerAddresses" -}}
{{- $name := include "pagoda.workersName" . -}}
{{- $addresses := list -}}
{{- range $rank := until (int .Values.tensorParallelSize) -}}
{{- $addresses = append $addresses (printf "%s-%d.%s.%s.svc.cluster.local:%d" $name $rank $name $.Release.Namespace (int $.Values.worker.port)) -}}
{{- end -}}
{{- join "," $addresses -}}
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

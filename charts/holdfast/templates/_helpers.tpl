{{/* Names are fixed: one release per cluster, and the webhook recognises
holdfast's components by these service account names. */}}

{{- define "holdfast.labels" -}}
app.kubernetes.io/name: holdfast
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* holdfast.componentLabels: labels of one component; call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "holdfast.componentLabels" -}}
{{ include "holdfast.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "holdfast.selectorLabels" -}}
app.kubernetes.io/name: holdfast
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* holdfast.image: the image of a binary; call with (dict "ctx" $ "binary" "holdfast-webhook"). */}}
{{- define "holdfast.image" -}}
{{ printf "%s/%s:%s" .ctx.Values.image.repository .binary (default .ctx.Chart.AppVersion .ctx.Values.image.tag) }}
{{- end -}}

{{- define "holdfast.serviceAccountUser" -}}
system:serviceaccount:{{ .ctx.Release.Namespace }}:holdfast-{{ .component }}
{{- end -}}

{{/* Preferred anti-affinity spreading a component's replicas over nodes, unless the values give an affinity. */}}
{{- define "holdfast.affinity" -}}
{{- if .affinity }}
{{ toYaml .affinity }}
{{- else }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "holdfast.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end -}}

{{/* Restricted pod security: non-root, no privilege escalation, read-only root, no capabilities. */}}
{{- define "holdfast.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "holdfast.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "holdfast.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget when the component runs more than one replica. */}}
{{- define "holdfast.pdb" -}}
{{- if and .values.podDisruptionBudget.enabled (gt (int .replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: holdfast-{{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "holdfast.componentLabels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "holdfast.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The grantor's timings as flags (docs/design.md §3 L14): the units role runs on them and holdfast-webhook derives the lease floor from them, so both are rendered from controller.units.grantor alone. */}}
{{- define "holdfast.grantorArgs" -}}
{{- $g := .Values.controller.units.grantor -}}
- --leader-election-lease-duration={{ $g.electionLeaseDuration }}
- --leader-election-renew-deadline={{ $g.electionRenewDeadline }}
- --leader-election-retry-period={{ $g.electionRetryPeriod }}
- --apiserver-read-idle-timeout={{ $g.apiserverReadIdleTimeout }}
- --apiserver-ping-timeout={{ $g.apiserverPingTimeout }}
{{- range .Values.controller.units.extraArgs }}
{{- if regexMatch "^--(leader-election-(lease-duration|renew-deadline|retry-period)|apiserver-(read-idle|ping)-timeout)(=|$)" . }}
{{- fail (printf "controller.units.extraArgs: %s: set controller.units.grantor instead, so holdfast-webhook enforces the lease floor of the timings the grantor runs on" .) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* holdfast.leaseCASecret: the Secret holding the lease CA the units role mounts. */}}
{{- define "holdfast.leaseCASecret" -}}
{{- $t := .Values.controller.units.leaseTLS -}}
{{- if eq $t.mode "secret" -}}
{{ required "controller.units.leaseTLS.secretName is required when controller.units.leaseTLS.mode is secret" $t.secretName }}
{{- else -}}
holdfast-lease-ca
{{- end -}}
{{- end -}}

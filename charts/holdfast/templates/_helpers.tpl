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

{{/* holdfast.nodeStaticPodMounts: with node.actuator StaticPod (kubeadm), the host directories the static pod actuator touches, as a JSON list of {name, value, path, readOnly}: the kubelet's manifests directory and the PKI directory read-write, the apiserver template's and the kubelet kubeconfig's directories read-only (a mount of the kubeconfig alone would keep showing a file replaced by a rename), and the member data directory's parent read-write (finish-demote renames the member data directory beside itself, which a mount of that directory alone cannot do). It fails, naming the value and the way out, on values that would leave the actuator or the etcd pod's start condition without a file, or mount one directory over another. */}}
{{- define "holdfast.nodeStaticPodMounts" -}}
{{- $n := .Values.node -}}
{{- $sp := $n.staticPod -}}
{{- if not .Values.controller.voters.enabled -}}
{{- fail "node.actuator: StaticPod is the voter swap's role actuator, and controller.voters.enabled is false, so holdfast-node would run no actuator and mount none of its directories: set controller.voters.enabled=true, or leave node.actuator Systemd" -}}
{{- end -}}
{{- with $n.etcd.hostTLSDir -}}
{{- fail (printf "node.etcd.hostTLSDir: %s is for node.actuator Systemd: with StaticPod the etcd client files are under node.staticPod.pkiDir, mounted read-write, and a read-only mount there would keep the actuator from writing the member's certificates; leave it empty" .) -}}
{{- end -}}
{{- $pki := clean $sp.pkiDir -}}
{{- $manifests := clean $sp.manifestsDir -}}
{{- $template := dir (clean $sp.apiServerTemplate) -}}
{{- if eq $template $manifests -}}
{{- fail (printf "node.staticPod.apiServerTemplate: %s is in node.staticPod.manifestsDir, where the kubelet would run the template itself on every node; keep it in a directory of its own (the VoterPolicy's default is /etc/kubernetes/holdfast/kube-apiserver.yaml)" $sp.apiServerTemplate) -}}
{{- end -}}
{{- $data := dir (clean $sp.memberDataDir) -}}
{{- if eq $data "/" -}}
{{- fail (printf "node.staticPod.memberDataDir: %s is directly under /, and holdfast-node mounts its parent read-write to move it aside: keep the member data one level below a directory of its own (kubeadm's /var/lib/etcd)" $sp.memberDataDir) -}}
{{- end -}}
{{- /* The etcd pod's start condition runs with these files, and its init container (actuator.etcdPod) mounts only <pkiDir>/etcd, the host directory and the member data directory. */ -}}
{{- $etcdPKI := printf "%s/" (clean (printf "%s/etcd" $pki)) -}}
{{- $readable := list $etcdPKI (printf "%s/" (clean $n.hostDir)) (printf "%s/" (clean $sp.memberDataDir)) -}}
{{- range $k := list "caFile" "certFile" "keyFile" -}}
{{- $f := clean (index $n.etcd $k) -}}
{{- $in := false -}}
{{- range $readable -}}
{{- if hasPrefix . $f -}}
{{- $in = true -}}
{{- end -}}
{{- end -}}
{{- if and (index $n.etcd $k) (not $in) -}}
{{- fail (printf "node.etcd.%s: %s is in none of the host directories the etcd pod's start condition mounts (%s), so it could not ask the members whether its own was removed and etcd would not start; use kubeadm's files (%sca.crt, %shealthcheck-client.crt and %shealthcheck-client.key)" $k (index $n.etcd $k) (join ", " $readable) $etcdPKI $etcdPKI $etcdPKI) -}}
{{- end -}}
{{- end -}}
{{- $mounts := list
  (dict "name" "manifests" "value" "node.staticPod.manifestsDir" "path" $manifests "readOnly" false)
  (dict "name" "pki" "value" "node.staticPod.pkiDir" "path" $pki "readOnly" false)
  (dict "name" "apiserver-template" "value" "the directory of node.staticPod.apiServerTemplate" "path" $template "readOnly" true)
  (dict "name" "kubelet-kubeconfig" "value" "the directory of node.kubeletKubeconfig" "path" (dir (clean $n.kubeletKubeconfig)) "readOnly" true)
  (dict "name" "member-data" "value" "the parent of node.staticPod.memberDataDir" "path" $data "readOnly" false) -}}
{{- $seen := dict (clean $n.hostDir) "node.hostDir" -}}
{{- range $m := $mounts -}}
{{- with get $seen $m.path -}}
{{- fail (printf "%s and %s are both the host directory %s, which holdfast-node mounts once: give each its own directory" . $m.value $m.path) -}}
{{- end -}}
{{- $_ := set $seen $m.path $m.value -}}
{{- end -}}
{{- toJson $mounts -}}
{{- end -}}

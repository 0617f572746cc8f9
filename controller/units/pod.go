package units

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

const (
	// StateDir is where the pod's state volume is mounted: an emptyDir,
	// which lives as long as the pod, so a restart in place restores its
	// operating point and counts its starts (the incarnation's restart
	// count), and a new binding starts with nothing.
	StateDir    = "/var/lib/holdfast/state"
	stateVolume = "state"
	// LeaseTLSDir is where the pod's lease credentials are mounted
	// (docs/design.md §3 L12): its key and certificate, which the kubelet
	// gets from the lease signer through a PodCertificateRequest and
	// renews, and the lease CA from the signer's ClusterTrustBundle.
	LeaseTLSDir    = "/var/run/holdfast/lease-tls"
	leaseTLSVolume = "lease-tls"
	// leaseCertificateSeconds is the longest life the kubelet asks for; the
	// signer gives a day, and the kubelet renews at two thirds of it.
	leaseCertificateSeconds = 24 * 60 * 60
)

// PodName is the runtime pod of a binding: <unit>-runtime-e<epoch>.
func PodName(unit string, epoch int64) string {
	return holdfastv1.RuntimePodName(unit, epoch)
}

// Placement says where a new runtime pod may go, beyond what the scheduler's
// plugins decide from the Unit.
type Placement struct {
	// PrimarySelector: a first binding goes to a node matching the unit's
	// spec.nodeSelector.
	PrimarySelector bool
	// Node pins the pod to one node by name (a person's failover, or a pod
	// re-created at a binding whose node is already recorded). The pod
	// still never names the node: the scheduler places it.
	Node string
}

// RuntimePod builds the runtime pod of the unit's binding at epoch. It never
// sets nodeName: the controller decides when and with which epoch, the
// scheduler where. The mode and lease in its environment are the binding's
// recorded promise (L11), so the process runs as the record says.
func RuntimePod(u *holdfastv1.Unit, epoch int64, p Placement) *corev1.Pod {
	rt := u.Spec.Runtime
	pr := policy.NewPromise(u)
	if b := u.Status.RuntimeBinding; b != nil && b.Epoch == epoch && b.Promise != nil {
		pr = *b.Promise
	}
	mode := pr.Mode
	// The unit and the epoch come through the downward API from the pod's
	// own labels, so the pod and the process can never disagree about
	// which binding they are.
	env := []corev1.EnvVar{
		fieldEnv(holdfastv1.RuntimeEnvNamespace, "metadata.namespace"),
		fieldEnv(holdfastv1.RuntimeEnvUnitName, "metadata.labels['"+holdfastv1.LabelUnit+"']"),
		fieldEnv(holdfastv1.RuntimeEnvEpoch, "metadata.labels['"+holdfastv1.LabelEpoch+"']"),
		fieldEnv(holdfastv1.RuntimeEnvPodName, "metadata.name"),
		fieldEnv(holdfastv1.RuntimeEnvPodUID, "metadata.uid"),
		fieldEnv(holdfastv1.RuntimeEnvNodeName, "spec.nodeName"),
		fieldEnv(holdfastv1.RuntimeEnvPodIP, "status.podIP"),
		{Name: holdfastv1.RuntimeEnvMode, Value: string(mode)},
		{Name: holdfastv1.RuntimeEnvLeaseDuration, Value: pr.LeaseDuration().String()},
		{Name: holdfastv1.RuntimeEnvLeasePort, Value: strconv.Itoa(int(rt.LeasePort))},
		{Name: holdfastv1.RuntimeEnvHealthPort, Value: strconv.Itoa(int(rt.HealthPort))},
		{Name: holdfastv1.RuntimeEnvStateDir, Value: StateDir},
		{Name: holdfastv1.RuntimeEnvLeaseTLSDir, Value: LeaseTLSDir},
	}
	ports := []corev1.ContainerPort{
		{Name: "health", ContainerPort: rt.HealthPort, HostPort: rt.HealthPort, Protocol: corev1.ProtocolTCP},
		{Name: "lease", ContainerPort: rt.LeasePort, HostPort: rt.LeasePort, Protocol: corev1.ProtocolTCP},
	}
	// A Unit stored before metricsPort existed has none: the runtime then
	// keeps its own default, as it did.
	if rt.MetricsPort != 0 {
		env = append(env, corev1.EnvVar{Name: holdfastv1.RuntimeEnvMetricsPort, Value: strconv.Itoa(int(rt.MetricsPort))})
		ports = append(ports, corev1.ContainerPort{Name: "metrics", ContainerPort: rt.MetricsPort, HostPort: rt.MetricsPort, Protocol: corev1.ProtocolTCP})
	}
	env = append(env, rt.Env...)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PodName(u.Name, epoch),
			Namespace: u.Namespace,
			Labels: map[string]string{
				holdfastv1.LabelUnit:  u.Name,
				holdfastv1.LabelEpoch: strconv.FormatInt(epoch, 10),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         holdfastv1.GroupVersion.String(),
				Kind:               "Unit",
				Name:               u.Name,
				UID:                u.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			SchedulerName: holdfastv1.SchedulerName,
			// The runtime never calls the apiserver: a runtime that is
			// compromised holds no token of its namespace.
			AutomountServiceAccountToken: ptr.To(false),
			// The device is reached over the node's own network, and
			// the grantor reaches the lease endpoint at the node's IP.
			HostNetwork:   true,
			DNSPolicy:     corev1.DNSClusterFirstWithHostNet,
			RestartPolicy: corev1.RestartPolicyAlways,
			// The taint manager must not move a runtime: only this
			// controller decides when a unit leaves its node, and an
			// Autonomy runtime keeps controlling through a partition.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			Volumes: []corev1.Volume{
				{Name: stateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				leaseTLS(),
			},
			Containers: []corev1.Container{{
				Name:            holdfastv1.RuntimeContainer,
				Image:           rt.Image,
				ImagePullPolicy: rt.ImagePullPolicy,
				Args:            rt.Args,
				Env:             env,
				Resources:       rt.Resources,
				VolumeMounts: []corev1.VolumeMount{
					{Name: stateVolume, MountPath: StateDir},
					{Name: leaseTLSVolume, MountPath: LeaseTLSDir, ReadOnly: true},
				},
				Ports: ports,
				// L9: readiness answers to the lease and the drivers,
				// liveness only to a stalled scan. A fenced runtime is
				// not ready and is alive.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{
						Port: rt.HealthPort, Service: ptr.To(holdfastv1.HealthServiceReadiness)}},
					PeriodSeconds: 2, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{
						Port: rt.HealthPort, Service: ptr.To(holdfastv1.HealthServiceLiveness)}},
					PeriodSeconds: 10, FailureThreshold: 3, TimeoutSeconds: 2,
				},
			}},
		},
	}
	switch {
	case p.Node != "":
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{p.Node},
				}}}},
			},
		}}
	case p.PrimarySelector:
		pod.Spec.NodeSelector = u.Spec.NodeSelector
	}
	return pod
}

// leaseTLS is the lease credentials volume. The kubelet starts the
// container only once the signer has issued the pod's certificate, and
// the NodeRestriction admission plugin lets only the pod's own node ask for
// it: the key never leaves that node.
func leaseTLS() corev1.Volume {
	signer := leaseapi.SignerName
	return corev1.Volume{Name: leaseTLSVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{PodCertificate: &corev1.PodCertificateProjection{
				SignerName: leaseapi.SignerName, KeyType: "ECDSAP256",
				MaxExpirationSeconds: ptr.To(int32(leaseCertificateSeconds)),
				CredentialBundlePath: leaseapi.CredentialsFile,
			}},
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{
				SignerName: &signer, LabelSelector: &metav1.LabelSelector{}, Path: leaseapi.TrustBundleFile,
			}},
		},
	}}}
}

// PlaintextLease turns a runtime pod built by RuntimePod into one whose
// runtime serves its lease endpoint over plain HTTP, for a controller run
// with --insecure-plaintext-lease: no credentials volume, and the runtime
// told so.
func PlaintextLease(pod *corev1.Pod) {
	spec := &pod.Spec
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == leaseTLSVolume })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == leaseTLSVolume })
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == holdfastv1.RuntimeEnvLeaseTLSDir })
		c.Env = slices.Insert(c.Env, 0, corev1.EnvVar{Name: holdfastv1.RuntimeEnvInsecurePlaintextLease, Value: "true"})
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// PodEpoch is the epoch a runtime pod was created for, from its label.
func PodEpoch(pod *corev1.Pod) (int64, bool) {
	v, ok := pod.Labels[holdfastv1.LabelEpoch]
	if !ok {
		return 0, false
	}
	e, err := holdfastv1.ParseEpoch(v)
	return e, err == nil
}

// PodReady reports the pod's Ready condition.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

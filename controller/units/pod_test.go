package units

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestUnitPodProbesNameDifferentHealthServices: L9 lives in the pod the
// controller builds. Readiness asks the readiness service, liveness the
// liveness service, and the two names differ, so a fenced runtime (not
// ready, alive) is never killed for doing its job.
func TestUnitPodProbesNameDifferentHealthServices(t *testing.T) {
	pod := RuntimePod(failoverUnit(), 3, Placement{PrimarySelector: true})
	c := pod.Spec.Containers[0]
	r, l := c.ReadinessProbe.GRPC, c.LivenessProbe.GRPC
	if r == nil || l == nil || r.Service == nil || l.Service == nil {
		t.Fatalf("both probes must be gRPC health checks naming a service: %+v %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if *r.Service != holdfastv1.HealthServiceReadiness {
		t.Errorf("readiness asks %q, want %q", *r.Service, holdfastv1.HealthServiceReadiness)
	}
	if *l.Service != holdfastv1.HealthServiceLiveness {
		t.Errorf("liveness asks %q, want %q", *l.Service, holdfastv1.HealthServiceLiveness)
	}
	if holdfastv1.HealthServiceReadiness == holdfastv1.HealthServiceLiveness || *r.Service == *l.Service {
		t.Error("the two probes must ask two different services")
	}
	if r.Port != 9440 || l.Port != 9440 {
		t.Errorf("probes must use spec.runtime.healthPort: %d %d", r.Port, l.Port)
	}
}

func TestTheRuntimePodNeverNamesANodeAndCarriesItsBinding(t *testing.T) {
	u := failoverUnit()
	u.Spec.Runtime.Env = []corev1.EnvVar{{Name: "PLANT", Value: "north"}}
	first := RuntimePod(u, 1, Placement{PrimarySelector: true})
	if first.Name != "kiln-1-runtime-e1" || first.Namespace != "plant" {
		t.Fatalf("name %s/%s", first.Namespace, first.Name)
	}
	if a := first.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Fatalf("the runtime pod mounts a service account token (automountServiceAccountToken %v)", a)
	}
	if first.Spec.NodeName != "" || first.Spec.SchedulerName != holdfastv1.SchedulerName || !first.Spec.HostNetwork {
		t.Fatalf("the scheduler places it: nodeName %q scheduler %q hostNetwork %v", first.Spec.NodeName, first.Spec.SchedulerName, first.Spec.HostNetwork)
	}
	if first.Labels[holdfastv1.LabelUnit] != "kiln-1" || first.Labels[holdfastv1.LabelEpoch] != "1" {
		t.Fatalf("labels %v", first.Labels)
	}
	if first.Spec.NodeSelector["holdfast.io/device"] != "kiln-1" || first.Spec.Affinity != nil {
		t.Fatalf("a first binding goes to the primary selector: %+v %+v", first.Spec.NodeSelector, first.Spec.Affinity)
	}
	if o := first.OwnerReferences; len(o) != 1 || o[0].Kind != "Unit" || o[0].UID != "unit-uid" || o[0].Controller == nil || !*o[0].Controller {
		t.Fatalf("owner %+v", o)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range first.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for name, path := range map[string]string{
		holdfastv1.RuntimeEnvEpoch:     "metadata.labels['holdfast.io/epoch']",
		holdfastv1.RuntimeEnvUnitName:  "metadata.labels['holdfast.io/unit']",
		holdfastv1.RuntimeEnvNamespace: "metadata.namespace",
		holdfastv1.RuntimeEnvPodUID:    "metadata.uid",
		holdfastv1.RuntimeEnvPodIP:     "status.podIP",
	} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s must come through the downward API from %s: %+v", name, path, e)
		}
	}
	if env[holdfastv1.RuntimeEnvMode].Value != "Failover" || env[holdfastv1.RuntimeEnvLeaseDuration].Value != "30s" ||
		env[holdfastv1.RuntimeEnvLeasePort].Value != "9443" || env[holdfastv1.RuntimeEnvHealthPort].Value != "9440" ||
		env[holdfastv1.RuntimeEnvStateDir].Value != StateDir || env["PLANT"].Value != "north" {
		t.Errorf("env %+v", env)
	}
	// hostNetwork: every port the runtime listens on is a declared host
	// port, so two runtimes on one node never collide and the scheduler
	// refuses a node where one is taken.
	if env[holdfastv1.RuntimeEnvMetricsPort].Value != "9441" {
		t.Errorf("the metrics port comes from spec.runtime.metricsPort: %+v", env[holdfastv1.RuntimeEnvMetricsPort])
	}
	hostPorts := map[string]int32{}
	for _, p := range first.Spec.Containers[0].Ports {
		if p.HostPort != p.ContainerPort {
			t.Errorf("port %s: hostPort %d must equal containerPort %d on the host network", p.Name, p.HostPort, p.ContainerPort)
		}
		hostPorts[p.Name] = p.HostPort
	}
	if hostPorts["health"] != 9440 || hostPorts["lease"] != 9443 || hostPorts["metrics"] != 9441 {
		t.Errorf("host ports %v, want health 9440, lease 9443, metrics 9441", hostPorts)
	}
	if v := first.Spec.Volumes; len(v) != 2 || v[0].EmptyDir == nil || first.Spec.Containers[0].VolumeMounts[0].MountPath != StateDir {
		t.Errorf("the state directory is an emptyDir that lives as long as the pod: %+v", v)
	}
	for _, tol := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		found := false
		for _, tt := range first.Spec.Tolerations {
			found = found || (tt.Key == tol && tt.TolerationSeconds == nil && tt.Effect == corev1.TaintEffectNoExecute)
		}
		if !found {
			t.Errorf("the taint manager must never evict a runtime: no open toleration of %s", tol)
		}
	}

	manual := RuntimePod(u, 4, Placement{Node: "standby-2"})
	req := manual.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if manual.Spec.NodeName != "" || manual.Spec.NodeSelector != nil || req[0].MatchFields[0].Key != "metadata.name" || req[0].MatchFields[0].Values[0] != "standby-2" {
		t.Fatalf("a person's target is asked of the scheduler by node affinity, never named: %+v", manual.Spec)
	}
	auto := RuntimePod(u, 5, Placement{})
	if auto.Spec.NodeSelector != nil || auto.Spec.Affinity != nil {
		t.Fatalf("an automatic re-bind is the scheduler's choice among the targets: %+v", auto.Spec)
	}
}

// L12: the runtime pod mounts its lease credentials from the cluster, the
// key and certificate from the lease signer (the kubelet asks for them
// through a PodCertificateRequest; the key never leaves the node) and the CA
// from the signer's ClusterTrustBundle, and tells the runtime where they
// are. With --insecure-plaintext-lease it has neither and says so.
func TestTheRuntimePodMountsItsLeaseCredentialsFromTheSigner(t *testing.T) {
	pod := RuntimePod(failoverUnit(), 3, Placement{PrimarySelector: true})
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Projected != nil {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || len(vol.Projected.Sources) != 2 {
		t.Fatalf("no projected lease credentials: %+v", pod.Spec.Volumes)
	}
	pc, ctb := vol.Projected.Sources[0].PodCertificate, vol.Projected.Sources[1].ClusterTrustBundle
	if pc == nil || pc.SignerName != leaseapi.SignerName || pc.CredentialBundlePath != leaseapi.CredentialsFile || pc.KeyPath != "" {
		t.Fatalf("podCertificate source %+v, want the lease signer's credential bundle at %s", pc, leaseapi.CredentialsFile)
	}
	if ctb == nil || ctb.SignerName == nil || *ctb.SignerName != leaseapi.SignerName || ctb.LabelSelector == nil || ctb.Path != leaseapi.TrustBundleFile || ctb.Name != nil {
		t.Fatalf("clusterTrustBundle source %+v, want the lease signer's bundles at %s", ctb, leaseapi.TrustBundleFile)
	}
	c := pod.Spec.Containers[0]
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.Name == vol.Name && m.MountPath == LeaseTLSDir && m.ReadOnly
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if !mounted || env[holdfastv1.RuntimeEnvLeaseTLSDir] != LeaseTLSDir {
		t.Fatalf("mounted %v at %s, env %v", mounted, LeaseTLSDir, env)
	}
	if _, ok := env[holdfastv1.RuntimeEnvInsecurePlaintextLease]; ok {
		t.Fatal("a secure runtime pod says the lease is plaintext")
	}

	PlaintextLease(pod)
	c = pod.Spec.Containers[0]
	env = map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if len(pod.Spec.Volumes) != 1 || len(c.VolumeMounts) != 1 || env[holdfastv1.RuntimeEnvInsecurePlaintextLease] != "true" {
		t.Fatalf("a plaintext runtime pod: volumes %+v mounts %+v env %v", pod.Spec.Volumes, c.VolumeMounts, env)
	}
	if _, ok := env[holdfastv1.RuntimeEnvLeaseTLSDir]; ok {
		t.Fatal("a plaintext runtime pod still names a lease TLS directory")
	}
}

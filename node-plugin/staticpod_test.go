package nodeplugin

import (
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestActuatorIsChosenByTheVoterPolicyAlone(t *testing.T) {
	static := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{
		Actuator: holdfastv1.ActuatorStaticPod,
		StaticPod: &holdfastv1.StaticPodSettings{EtcdImage: "registry.k8s.io/etcd:3.6.5-0", ManifestsDir: "/etc/kubernetes/manifests",
			PKIDir: "/etc/kubernetes/pki", APIServerTemplate: "/etc/kubernetes/holdfast/kube-apiserver.yaml"}}}}
	for _, tc := range []struct {
		name string
		vp   *holdfastv1.VoterPolicy
		want actuatorSettings
	}{
		{"no policy", nil, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
		{"policy without an actuator", &holdfastv1.VoterPolicy{}, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
		{"static pods", static, actuatorSettings{Actuator: holdfastv1.ActuatorStaticPod, EtcdImage: "registry.k8s.io/etcd:3.6.5-0",
			ManifestsDir: "/etc/kubernetes/manifests", PKIDir: "/etc/kubernetes/pki", APIServerTemplate: "/etc/kubernetes/holdfast/kube-apiserver.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveActuator(tc.vp); got != tc.want {
				t.Fatalf("resolveActuator = %+v, want %+v", got, tc.want)
			}
		})
	}
}

package nodeplugin

import (
	"strings"
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The VoterPolicy chooses the actuator; while none exists the chart's
// node.actuator (--actuator) does, so a kubeadm host without a policy runs
// the StaticPod actuator, never the Systemd one it has no D-Bus for.
func TestActuatorIsChosenByTheVoterPolicyThenTheChartsFlag(t *testing.T) {
	static := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{
		Actuator: holdfastv1.ActuatorStaticPod,
		StaticPod: &holdfastv1.StaticPodSettings{EtcdImage: "registry.k8s.io/etcd:3.6.5-0", ManifestsDir: "/etc/kubernetes/manifests",
			PKIDir: "/etc/kubernetes/pki", APIServerTemplate: "/etc/kubernetes/holdfast/kube-apiserver.yaml"}}}}
	systemd := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{Actuator: holdfastv1.ActuatorSystemd}}}
	staticSettings := actuatorSettings{Actuator: holdfastv1.ActuatorStaticPod, EtcdImage: "registry.k8s.io/etcd:3.6.5-0",
		ManifestsDir: "/etc/kubernetes/manifests", PKIDir: "/etc/kubernetes/pki", APIServerTemplate: "/etc/kubernetes/holdfast/kube-apiserver.yaml"}
	for _, tc := range []struct {
		name string
		flag string
		vp   *holdfastv1.VoterPolicy
		want actuatorSettings
	}{
		{"no policy, no flag", "", nil, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
		{"no policy, the chart's Systemd", holdfastv1.ActuatorSystemd, nil, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
		{"no policy, the chart's StaticPod", holdfastv1.ActuatorStaticPod, nil, actuatorSettings{Actuator: holdfastv1.ActuatorStaticPod}},
		{"policy without an actuator", holdfastv1.ActuatorStaticPod, &holdfastv1.VoterPolicy{}, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
		{"static pods", holdfastv1.ActuatorSystemd, static, staticSettings},
		{"the policy over the chart", holdfastv1.ActuatorStaticPod, systemd, actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveActuator(tc.flag, tc.vp); got != tc.want {
				t.Fatalf("resolveActuator = %+v, want %+v", got, tc.want)
			}
		})
	}
	// With no policy the member data directory follows the chart's choice.
	if h := resolveHost(Options{Actuator: holdfastv1.ActuatorStaticPod}, nil); h.MemberDataDir != "/var/lib/etcd" {
		t.Fatalf("no policy, the chart's StaticPod: member data directory %q, want kubeadm's", h.MemberDataDir)
	}
}

func TestActuatorFlagIsSystemdOrStaticPod(t *testing.T) {
	o, err := ParseFlags([]string{"--node-name=n1"})
	if err != nil || o.Actuator != holdfastv1.ActuatorSystemd {
		t.Fatalf("default: %q %v", o.Actuator, err)
	}
	o, err = ParseFlags([]string{"--node-name=n1", "--actuator=StaticPod"})
	if err != nil || o.Actuator != holdfastv1.ActuatorStaticPod {
		t.Fatalf("set: %q %v", o.Actuator, err)
	}
	if _, err := ParseFlags([]string{"--node-name=n1", "--actuator=Kubeadm"}); err == nil || !strings.Contains(err.Error(), "--actuator") {
		t.Fatalf("an unknown actuator: %v, want an error naming --actuator", err)
	}
}

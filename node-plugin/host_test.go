package nodeplugin

import (
	"strings"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// A flag wins over the VoterPolicy, the policy over the defaults; the
// default member data directory is the actuator's (kubeadm's with
// StaticPod).
func TestHostSettingsFollowFlagThenPolicyThenDefault(t *testing.T) {
	policy := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{
		ServerUnit: "etcd-server.service", MemberDataDir: "/srv/etcd"}}}
	static := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{
		Actuator: holdfastv1.ActuatorStaticPod, StaticPod: &holdfastv1.StaticPodSettings{EtcdImage: "registry.k8s.io/etcd:3.6.5-0"}}}}
	for _, tc := range []struct {
		name  string
		flags Options
		vp    *holdfastv1.VoterPolicy
		want  hostSettings
	}{
		{"no policy", Options{}, nil, hostSettings{"k3s.service", "k3s-agent.service", "/var/lib/rancher/k3s/server/db", ""}},
		{"policy", Options{}, policy, hostSettings{"etcd-server.service", "k3s-agent.service", "/srv/etcd", ""}},
		{"flags over policy", Options{MemberDataDir: "/data/db", ServerTombstone: "/data/tomb"}, policy,
			hostSettings{"etcd-server.service", "k3s-agent.service", "/data/db", "/data/tomb"}},
		{"static pods", Options{}, static, hostSettings{"k3s.service", "k3s-agent.service", "/var/lib/etcd", ""}},
		{"static pods, flag", Options{MemberDataDir: "/var/lib/etcd/data"}, static, hostSettings{"k3s.service", "k3s-agent.service", "/var/lib/etcd/data", ""}},
	} {
		if got := resolveHost(tc.flags, tc.vp); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The report and fitness intervals are flags (a drill judges fitness over a
// one-minute window), defaulting to 30s and 5m; a non-positive one is
// refused with the flag's name.
func TestReportAndFitnessIntervalsAreFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--node-name=n1"})
	if err != nil || o.ReportEvery != 30*time.Second || o.FitnessEvery != 5*time.Minute {
		t.Fatalf("defaults: %v %v %v", o.ReportEvery, o.FitnessEvery, err)
	}
	o, err = ParseFlags([]string{"--node-name=n1", "--report-interval=5s", "--fitness-interval=10s"})
	if err != nil || o.ReportEvery != 5*time.Second || o.FitnessEvery != 10*time.Second {
		t.Fatalf("set: %v %v %v", o.ReportEvery, o.FitnessEvery, err)
	}
	if _, err := ParseFlags([]string{"--node-name=n1", "--fitness-interval=0s"}); err == nil || !strings.Contains(err.Error(), "--fitness-interval") {
		t.Fatalf("a zero interval: %v, want an error naming --fitness-interval", err)
	}
}

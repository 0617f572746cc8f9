package nodeplugin

import (
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// A flag wins over the VoterPolicy, the policy over k3s's defaults.
func TestHostSettingsFollowFlagThenPolicyThenDefault(t *testing.T) {
	policy := &holdfastv1.VoterPolicy{Spec: holdfastv1.VoterPolicySpec{Host: holdfastv1.HostRoleSettings{
		ServerUnit: "etcd-server.service", MemberDataDir: "/srv/etcd"}}}
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
	} {
		if got := resolveHost(tc.flags, tc.vp); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

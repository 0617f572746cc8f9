//go:build integration

package voters_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
)

// TestZeroCooldownAndDrainWaitRoundTrip: a typed client's 0 for
// spec.cooldownSeconds and spec.workloadDrainWaitSeconds reaches the real
// apiserver and comes back 0, not the CRD's defaults (3600, 900), and the
// voter controller reads it as no cooldown and no drain wait; a policy that
// leaves them out gets the defaults. What 0 then decides is
// TestZeroCooldownAndDrainWaitMeanNone.
func TestZeroCooldownAndDrainWaitRoundTrip(t *testing.T) {
	ctx := context.Background()
	stored := func(cooldown, drain *int32) *holdfastv1.VoterPolicy {
		t.Helper()
		p := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
			Spec: holdfastv1.VoterPolicySpec{CooldownSeconds: cooldown, WorkloadDrainWaitSeconds: drain,
				Etcd: holdfastv1.EtcdAccess{Endpoints: []string{"https://10.0.0.1:2379"}}}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := env.Client.Delete(ctx, p); err != nil {
				t.Fatal(err)
			}
		}()
		back := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), back); err != nil {
			t.Fatal(err)
		}
		return back
	}
	seconds := func(v *int32) any {
		if v == nil {
			return "absent"
		}
		return *v
	}
	for _, tc := range []struct {
		name                   string
		cooldown, drain        *int32
		wantCooldown, wantWait int32
	}{
		{"set to 0", new(int32(0)), new(int32(0)), 0, 0},
		{"left out", nil, nil, 3600, 900},
	} {
		back := stored(tc.cooldown, tc.drain)
		s := back.Spec
		if s.CooldownSeconds == nil || *s.CooldownSeconds != tc.wantCooldown || s.WorkloadDrainWaitSeconds == nil || *s.WorkloadDrainWaitSeconds != tc.wantWait {
			t.Errorf("%s: read back cooldownSeconds %v, workloadDrainWaitSeconds %v; want %d and %d",
				tc.name, seconds(s.CooldownSeconds), seconds(s.WorkloadDrainWaitSeconds), tc.wantCooldown, tc.wantWait)
			continue
		}
		cooldown, wait := voters.CooldownAndDrainWait(back)
		if cooldown != time.Duration(tc.wantCooldown)*time.Second || wait != time.Duration(tc.wantWait)*time.Second {
			t.Errorf("%s: the controller reads cooldown %v and drain wait %v; want %ds and %ds", tc.name, cooldown, wait, tc.wantCooldown, tc.wantWait)
		}
	}
}

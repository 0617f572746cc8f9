package voters

import (
	"slices"
	"strings"
	"testing"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// TestSwapGatesFromTheRecordedStatus is the view kubectl holdfast swap gets:
// the gates judged from the VoterPolicy status the controller recorded.
func TestSwapGatesFromTheRecordedStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		out, in  string
		mutate   func(o *Observation)
		wantNone bool
		says     []string
	}{
		{name: "every gate holds", out: "n1", in: "n4", mutate: func(*Observation) {}, wantNone: true},
		{name: "no incoming named: the scheduler picks", out: "n1", mutate: func(*Observation) {}, wantNone: true},
		{name: "a paused voter is named", out: "n1", in: "n4", mutate: func(o *Observation) {
			pause(o, "n2")
			c := Assess(o)
			o.Policy.Status = PolicyStatus(o, &c)
		}, says: []string{"spec: Forbidden: etcd is not healthy", "n2"}},
		{name: "a labelled node that does not vote blocks", out: "n1", in: "n4", mutate: func(o *Observation) {
			o.Nodes["n5"].Labels[holdfastv1.LabelEtcdRole] = "true"
		}, says: []string{"node n5 is labelled node-role.kubernetes.io/etcd but has no etcd member (member but not a voter)"}},
		{name: "a tombstone of this cluster on the incoming node", out: "n1", in: "n4", mutate: func(o *Observation) {
			o.Nodes["n4"].Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"1","clusterID":"` + o.Policy.Status.ClusterID + `"}`
		}, says: []string{"spec.incoming: Forbidden: n4 carries a tombstone of this cluster"}},
		{name: "pinned and unprovisioned refused with each reason", out: "n1", in: "n4", mutate: func(o *Observation) {
			o.Nodes["n1"].Labels[holdfastv1.LabelPinned] = "true"
			delete(o.Nodes["n4"].Annotations, holdfastv1.AnnotationProvisioned)
		}, says: []string{"spec.outgoing: Forbidden: n1 is pinned", "spec.incoming: Forbidden: n4 is not provisioned"}},
		{name: "an unknown outgoing node", out: "nx", in: "n4", mutate: func(*Observation) {},
			says: []string{"spec.outgoing: Forbidden: node nx does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fixture()
			tc.mutate(o)
			got := SwapGates(holdfastv1.VoterSwapSpec{Outgoing: tc.out, Incoming: tc.in},
				policy.GateInput{Policy: o.Policy, Nodes: o.Nodes, SwapLease: o.Lease, Now: o.Now})
			if tc.wantNone && len(got) > 0 {
				t.Fatalf("gates fail: %v", got)
			}
			all := strings.Join(got, "\n")
			for _, s := range tc.says {
				if !strings.Contains(all, s) {
					t.Errorf("gates %q do not say %q", all, s)
				}
			}
		})
	}
}

// TestPolicyStatusStampsTheObservationTime: each pass's status carries when
// etcd was observed, restamped once it is half a heartbeat old (so an idle
// pass writes about once per heartbeat, not on every event), and the gates
// refuse a status nobody restamped for over rules.MaxStatusAge, whatever
// EtcdHealthy still says.
func TestPolicyStatusStampsTheObservationTime(t *testing.T) {
	o := fixture()
	if got := o.Policy.Status.ObservedTime; got == nil || !got.Time.Equal(t0) {
		t.Fatalf("first observation stamped %v, want %v", got, t0)
	}
	c := Assess(o)
	o.Now = t0.Add(policy.StatusHeartbeat/2 - time.Second)
	if got := PolicyStatus(o, &c).ObservedTime; !got.Time.Equal(t0) {
		t.Errorf("restamped at %v though younger than half a heartbeat: the status would be written on every pass", got)
	}
	o.Now = t0.Add(policy.StatusHeartbeat / 2)
	if got := PolicyStatus(o, &c).ObservedTime; !got.Time.Equal(o.Now) {
		t.Errorf("stamp %v at half a heartbeat, want %v", got, o.Now)
	}
	o.Now = t0.Add(-time.Minute)
	if got := PolicyStatus(o, &c).ObservedTime; !got.Time.Equal(o.Now) {
		t.Errorf("stamp %v after the clock went back, want %v", got, o.Now)
	}

	// The recorded status, judged later by kubectl holdfast swap or the
	// webhook: stale, it is refused by its age alone.
	o = fixture()
	later := t0.Add(policy.MaxStatusAge + 10*time.Second)
	got := SwapGates(holdfastv1.VoterSwapSpec{Outgoing: "n1", Incoming: "n4"},
		policy.GateInput{Policy: o.Policy, Nodes: o.Nodes, Now: later})
	if want := "status.observedTime: Forbidden: voter policy status is 1m10s old; the voters role is not observing etcd (its status may be at most 1m0s old)"; len(got) != 1 || got[0] != want {
		t.Errorf("gates on a stale status: %q, want only %q", got, want)
	}
}

// TestPolicyStatusListsTheVotersClientURLs: status.clientURLs are the
// voters' client URLs from the member list (the node plugins reach etcd
// through them), learners and unstarted members left out; a pass that
// could not read the member list keeps the last ones.
func TestPolicyStatusListsTheVotersClientURLs(t *testing.T) {
	o := fixture()
	withLearner(o, true)
	c := Assess(o)
	want := []string{clientURL("n1"), clientURL("n2"), clientURL("n3")}
	if got := PolicyStatus(o, &c).ClientURLs; !slices.Equal(got, want) {
		t.Errorf("clientURLs %v, want %v", got, want)
	}
	o.Policy.Status.ClientURLs = want
	o.Etcd = EtcdView{Err: "no endpoint answered"}
	c = Assess(o)
	if got := PolicyStatus(o, &c).ClientURLs; !slices.Equal(got, want) {
		t.Errorf("clientURLs %v with the member list unread, want the last ones %v", got, want)
	}
}

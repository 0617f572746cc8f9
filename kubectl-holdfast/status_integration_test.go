//go:build integration

package plugin_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
	"github.com/holdfast-io/holdfast/policy"
)

func TestStatusShowsUnitsVotersAndTheSwapInProgress(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	now := metav1.Now()
	mkUnit(t, ns, "kiln-1", holdfastv1.Failover,
		&holdfastv1.RuntimeBinding{Node: "edge-1", Epoch: 4, Pod: "kiln-1-runtime-e4", LeaseState: holdfastv1.LeaseHeld, LeaseStateEpoch: 4},
		cond(holdfastv1.ConditionHeld, metav1.ConditionFalse, holdfastv1.ReasonRenewalAcknowledged, "Renewal acknowledged at epoch 4"),
		cond(holdfastv1.ConditionRuntimeReady, metav1.ConditionTrue, holdfastv1.ReasonPodReady, "ready"))
	mkUnit(t, ns, "press-2", holdfastv1.Failover,
		&holdfastv1.RuntimeBinding{Node: "edge-2", Epoch: 9, LeaseState: holdfastv1.LeaseExpired, LeaseStateEpoch: 9,
			Expiry: &holdfastv1.LeaseExpiryRecord{Verdict: holdfastv1.VerdictSelfFenced, LastAttempt: holdfastv1.RenewalUnreachable, At: now, Epoch: 9}},
		cond(holdfastv1.ConditionFailoverSuspended, metav1.ConditionTrue, holdfastv1.ReasonAllTargetsTried, "every standby was tried: standby-1"))
	mkUnit(t, ns, "mixer-3", holdfastv1.Autonomy, nil)
	// Two automatic re-binds no scheduler placed, as the unit controller
	// records them; the table shows the count and the latest one's
	// FailedScheduling words (listed first here: latest by epoch, not by
	// position).
	mkUnit(t, ns, "oven-4", holdfastv1.Failover,
		&holdfastv1.RuntimeBinding{Epoch: 8, Pod: "oven-4-runtime-e8", LeaseState: holdfastv1.LeasePending, LeaseStateEpoch: 8,
			Origin: holdfastv1.OriginAutomatic, UnplacedRebinds: []holdfastv1.UnplacedRebind{
				{Epoch: 7, Message: "pod oven-4-runtime-e7 stayed Pending, the scheduler could not place it: 0/3 nodes are available: " +
					"1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 node(s) didn't match Pod's node affinity/selector. " +
					"preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling. (Unschedulable)"},
				{Epoch: 6, Message: "pod oven-4-runtime-e6 stayed Pending and no scheduler reported on it: is holdfast-scheduler running?"},
			}})

	for _, n := range []string{"cp-1", "cp-2", "cp-3", "cp-4"} {
		mkNode(t, n, map[string]string{holdfastv1.LabelEtcdRole: "true"})
	}
	vp := &holdfastv1.VoterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec:       holdfastv1.VoterPolicySpec{Etcd: holdfastv1.EtcdAccess{Endpoints: []string{"https://10.0.0.1:2379"}}},
	}
	if err := env.Client.Create(ctx, vp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, vp) })
	vp.Status = holdfastv1.VoterPolicyStatus{Voters: []string{"cp-1", "cp-2", "cp-3"}, Learners: []string{"edge-7"}, Leader: "cp-2"}
	if err := env.Client.Status().Update(ctx, vp); err != nil {
		t.Fatal(err)
	}
	running := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "swap-cp3-edge7"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: "cp-3", Incoming: "edge-7"}}
	done := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "swap-old"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: "cp-9"}}
	for _, s := range []*holdfastv1.VoterSwap{running, done} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, s) })
	}
	// In Promote for 4 minutes: since its first record there, not its last.
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	started, inPromote := ago(10*time.Minute), ago(4*time.Minute)
	running.Status = holdfastv1.VoterSwapStatus{SwapID: "20261129T195900Z-cp-3-edge-7", Incoming: "edge-7", Step: holdfastv1.StepPromote, Phase: holdfastv1.SwapRunning,
		StartedAt: &started, History: []holdfastv1.SwapStepRecord{
			{Step: holdfastv1.StepGates, Outcome: "Done", At: started},
			{Step: holdfastv1.StepPromote, Outcome: "Started", At: inPromote},
			{Step: holdfastv1.StepPromote, Outcome: "LearnerAdded", Message: "learner added", At: ago(time.Minute)}}}
	done.Status = holdfastv1.VoterSwapStatus{Phase: holdfastv1.SwapSucceeded}
	for _, s := range []*holdfastv1.VoterSwap{running, done} {
		if err := env.Client.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
			Annotations: map[string]string{holdfastv1.AnnotationSwapID: "20261129T195900Z-cp-3-edge-7", holdfastv1.AnnotationSwapNodes: "cp-3,edge-7"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holdfast-controller-0"), LeaseDurationSeconds: ptr.To[int32](60),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if err := env.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, lease) })

	// The table a person reads.
	r := admin(t, "status", "-n", ns)
	wantExit(t, r, plugin.ExitOK)
	for _, want := range []string{
		"UNITS (namespace " + ns + ")",
		"kiln-1   Failover  edge-1  4      Held     False  True   -",
		"press-2  Failover  edge-2  9      Expired",
		"FAILOVER SUSPENDED: every standby was tried: standby-1 (+1 more: -o wide)",
		"mixer-3  Autonomy  -       -      -        -      -      -         not bound yet",
		"oven-4   Failover  -       8      Pending  -      -      2         2 re-bind(s) never placed, last (epoch 7): " +
			"0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/un…\n",
		// No voters role ever stamped this status: the gates refuse it.
		"observed:                   never (stale: swaps refused)\n",
		"voters:                     cp-1, cp-2 (leader), cp-3  3 of target 3",
		"learners:                   edge-7",
		"labelled etcd, not voting:  cp-4",
		"automatic swaps:            dry run (proposed only)",
		"Promote LearnerAdded: learner added",
		"swap Lease held by holdfast-controller-0 for 20261129T195900Z-cp-3-edge-7 (nodes cp-3,edge-7)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	if !regexp.MustCompile(`\nswap-cp3-edge7 cp-3 edge-7 Promote 4m(\ds)? Running `).MatchString(squashLines(r.stdout)) {
		t.Errorf("status lacks the swap in Promote for 4m:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "swap-old") {
		t.Errorf("a finished swap is not in progress:\n%s", r.stdout)
	}

	// The JSON a script reads.
	r = admin(t, "status", "-n", ns, "-o", "json")
	wantExit(t, r, plugin.ExitOK)
	var rep plugin.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, r.stdout)
	}
	if len(rep.Units) != 4 || rep.Units[1].Name != "mixer-3" || rep.Units[3].Name != "press-2" ||
		rep.Units[3].LeaseState != "Expired" || !strings.HasPrefix(rep.Units[3].Attention[0], "FAILOVER SUSPENDED") ||
		!strings.Contains(rep.Units[3].Attention[1], "SelfFenced, last renewal Unreachable") || rep.Units[3].UnplacedRebinds != 0 {
		t.Errorf("units in JSON: %+v", rep.Units)
	}
	if u := rep.Units[2]; u.Name != "oven-4" || u.UnplacedRebinds != 2 || !strings.HasPrefix(u.LastUnplaced, "pod oven-4-runtime-e7 stayed Pending") ||
		!strings.HasSuffix(u.LastUnplaced, "(Unschedulable)") {
		t.Errorf("unplaced re-binds in JSON: %+v", u)
	}
	if rep.Voters == nil || rep.Voters.Leader != "cp-2" || len(rep.Voters.Voters) != 3 || rep.Voters.LabelledNotVoting[0] != "cp-4" ||
		rep.Voters.ObservedTime != "" || !strings.Contains(rep.Voters.Stale, "carries no observation time") {
		t.Errorf("voters in JSON: %+v", rep.Voters)
	}
	if len(rep.Swaps) != 1 || rep.Swaps[0].Name != "swap-cp3-edge7" || rep.Swaps[0].Step != "Promote" || rep.Lease == nil ||
		rep.Swaps[0].StepSince != inPromote.UTC().Format(time.RFC3339) || !strings.HasPrefix(rep.Swaps[0].InStep, "4m") {
		t.Errorf("swaps in JSON: %+v lease %+v", rep.Swaps, rep.Lease)
	}
	if rep.APIVersion != plugin.ReportAPIVersion || rep.Kind != plugin.ReportKind {
		t.Errorf("status -o json is apiVersion %q kind %q, want %q %q", rep.APIVersion, rep.Kind, plugin.ReportAPIVersion, plugin.ReportKind)
	}

	// -A: the units of every namespace, each with its namespace.
	other := env.Namespace(t)
	mkUnit(t, other, "kiln-9", holdfastv1.Failover, nil)
	r = admin(t, "status", "-A", "-o", "json")
	wantExit(t, r, plugin.ExitOK)
	var all plugin.Report
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		t.Fatalf("status -A -o json is not JSON: %v\n%s", err, r.stdout)
	}
	seen := map[string]bool{}
	for _, u := range all.Units {
		seen[u.Namespace+"/"+u.Name] = true
	}
	if !seen[ns+"/press-2"] || !seen[other+"/kiln-9"] {
		t.Errorf("status -A lists %v, want %s/press-2 and %s/kiln-9 among them", seen, ns, other)
	}
	// The same report as YAML.
	r = admin(t, "status", "-n", ns, "-o", "yaml")
	wantExit(t, r, plugin.ExitOK)
	var fromYAML plugin.Report
	if err := yaml.UnmarshalStrict([]byte(r.stdout), &fromYAML); err != nil {
		t.Fatalf("status -o yaml is not the report: %v\n%s", err, r.stdout)
	}
	names := func(r plugin.Report) (out []string) {
		for _, u := range r.Units {
			out = append(out, u.Name+"/"+u.LeaseState)
		}
		return out
	}
	if !slices.Equal(names(fromYAML), names(rep)) || fromYAML.Kind != plugin.ReportKind || fromYAML.Voters == nil || fromYAML.Voters.Leader != "cp-2" {
		t.Errorf("status -o yaml differs from -o json:\n%s", r.stdout)
	}

	// A swap left behind between promotion and removal: four voters by
	// etcd's vote, evenSince and the last finished swap, as the controller
	// records them.
	even := metav1.NewTime(time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC))
	finished := metav1.NewTime(time.Date(2026, 11, 29, 20, 30, 0, 0, time.UTC))
	vp.Status.Voters = []string{"cp-1", "cp-2", "cp-3", "cp-4"}
	vp.Status.Learners = nil
	vp.Status.EvenSince = &even
	vp.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "swap-old", SwapID: "20261129T200000Z-cp-9-cp-4", Phase: holdfastv1.SwapSucceeded, FinishedAt: &finished}
	// Stamped half a heartbeat ago, as the voters role stamps it.
	vp.Status.ObservedTime = &metav1.Time{Time: time.Now().Add(-policy.StatusHeartbeat / 2)}
	if err := env.Client.Status().Update(ctx, vp); err != nil {
		t.Fatal(err)
	}
	r = admin(t, "status", "-n", ns)
	wantExit(t, r, plugin.ExitOK)
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !regexp.MustCompile(`\n  observed: +\d+s ago\n`).MatchString(r.stdout) {
		t.Errorf("a fresh status reads as its age alone:\n%s", r.stdout)
	}
	for _, want := range []string{
		"voters: cp-1, cp-2 (leader), cp-3, cp-4 4 of target 3",
		"EVEN VOTER COUNT since: 2026-11-29T21:00:00Z (the next pass finishes the swap left behind)",
		"last swap: swap-old Succeeded at 2026-11-29T20:30:00Z",
		"swap-cp3-edge7 cp-3 edge-7 Promote 4m",
		"swap Lease held by holdfast-controller-0 for 20261129T195900Z-cp-3-edge-7 (nodes cp-3,edge-7)",
	} {
		if !strings.Contains(squash(r.stdout), want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "learners:") || strings.Contains(r.stdout, "not voting") {
		t.Errorf("no learner and every labelled node votes:\n%s", r.stdout)
	}
	r = admin(t, "status", "-n", ns, "-o", "json")
	rep = plugin.Report{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, r.stdout)
	}
	if rep.Voters == nil || len(rep.Voters.Voters) != 4 || rep.Voters.EvenSince != "2026-11-29T21:00:00Z" ||
		rep.Voters.LastSwap != "swap-old Succeeded at 2026-11-29T20:30:00Z" || rep.Voters.Stale != "" || rep.Voters.ObservedAge == "" || rep.Lease == nil || rep.Lease.Holder != "holdfast-controller-0" {
		t.Errorf("voters in JSON: %+v lease %+v", rep.Voters, rep.Lease)
	}

	// The age of the voters role's last look at etcd, and whether the swap
	// gates still trust it: stale past rules.MaxStatusAge, or stamped that
	// far in the future by a clock that disagrees.
	// The clock runs between the write and the plugin's read: the ages are
	// matched to the second they may have moved.
	for _, c := range []struct {
		offset           time.Duration
		table, wide, jsn string
	}{
		{offset: -7 * time.Minute, table: `(^|\n)observed: 7m(\ds)? ago \(stale: swaps refused\)\n`,
			wide: `(^|\n)observed: 7m(\ds)? ago \(stale: swaps refused\): voter policy status is 7m\ds old; the voters role is not observing etcd \(its status may be at most 1m0s old\)\n`,
			jsn:  `^voter policy status is 7m\ds old`},
		{offset: 5 * time.Minute, table: `(^|\n)observed: in (4m5\ds|5m) \(stale: swaps refused\)\n`,
			wide: `\(stale: swaps refused\): voter policy status is stamped (4m5\ds|5m0s) in the future; the voters role's clock and this one disagree\n`,
			jsn:  `^voter policy status is stamped (4m5\ds|5m0s) in the future`},
	} {
		vp.Status.ObservedTime = &metav1.Time{Time: time.Now().Add(c.offset)}
		if err := env.Client.Status().Update(ctx, vp); err != nil {
			t.Fatal(err)
		}
		r = admin(t, "status", "-n", ns)
		wantExit(t, r, plugin.ExitOK)
		if !regexp.MustCompile(c.table).MatchString(squashLines(r.stdout)) {
			t.Errorf("observed %v: status lacks %s:\n%s", c.offset, c.table, r.stdout)
		}
		r = admin(t, "status", "-n", ns, "-o", "wide")
		if !regexp.MustCompile(c.wide).MatchString(squashLines(r.stdout)) {
			t.Errorf("observed %v: status -o wide lacks %s:\n%s", c.offset, c.wide, r.stdout)
		}
		r = admin(t, "status", "-n", ns, "-o", "json")
		rep = plugin.Report{}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("status -o json is not JSON: %v\n%s", err, r.stdout)
		}
		if rep.Voters == nil || rep.Voters.ObservedTime == "" || !regexp.MustCompile(c.jsn).MatchString(rep.Voters.Stale) {
			t.Errorf("observed %v: voters in JSON: %+v", c.offset, rep.Voters)
		}
	}

	// A person who may not read the swap Lease still gets the rest, with a note.
	r = holdfast(t, operatorKubeconfig(t), "status", "-n", ns)
	wantExit(t, r, plugin.ExitOK)
	if !strings.Contains(r.stdout, "kiln-1") || !strings.Contains(r.stdout, "swap Lease kube-system/holdfast-voter-swap not readable") {
		t.Errorf("status for a viewer:\n%s", r)
	}

	// And through kubectl's own plugin discovery.
	kubectl := env.Kubectl()
	cmd := exec.Command(kubectl.Path, "holdfast", "status", "-n", ns)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubectl.Kubeconfig, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kiln-1") {
		t.Errorf("kubectl holdfast status: %v\n%s", err, out)
	}
}

// squashLines squashes each line's runs of blanks to one space, so a test
// asserts a table line without counting the padding.
func squashLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// setReady sets a Node's Ready condition, as its kubelet would.
func setReady(t *testing.T, name string, ready bool) {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
		return env.Client.Status().Update(context.Background(), &n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// editNode changes a Node's labels or annotations, as an admin or a node plugin would.
func editNode(t *testing.T, name string, mutate func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		mutate(&n)
		return env.Client.Update(context.Background(), &n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setPolicyStatus writes VoterPolicy default's status, as the voter controller would.
func setPolicyStatus(t *testing.T, st holdfastv1.VoterPolicyStatus) {
	t.Helper()
	setPolicyStatusAged(t, st, false)
}

// setPolicyStatusAged writes it as it is; stale keeps a nil observedTime
// (a status no voters role stamped).
func setPolicyStatusAged(t *testing.T, st holdfastv1.VoterPolicyStatus, stale bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p holdfastv1.VoterPolicy
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); err != nil {
			return err
		}
		p.Status = st
		if p.Status.ObservedTime == nil && !stale {
			// Stamped as the voters role stamps it on every pass.
			p.Status.ObservedTime = &metav1.Time{Time: time.Now()}
		}
		return env.Client.Status().Update(context.Background(), &p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

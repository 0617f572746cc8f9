//go:build integration

package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var (
	env *testenv.Env
	// binDir holds the built kubectl-holdfast, for kubectl's plugin discovery.
	binDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubectl-holdfast-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, err := testenv.RepoRoot()
	if err == nil {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-holdfast"), "./cmd/kubectl-holdfast")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		err = build.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "building kubectl-holdfast: %v\n", err)
		os.Exit(1)
	}
	binDir = dir
	defer os.RemoveAll(dir)
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env, testenv.Options{})
}

// run is one run of the real plugin binary.
type run struct {
	code           int
	stdout, stderr string
}

func (r run) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// holdfast runs the built binary with a kubeconfig.
func holdfast(t *testing.T, kubeconfig string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl-holdfast"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("running kubectl-holdfast: %v", err)
	}
	return r
}

func admin(t *testing.T, args ...string) run {
	t.Helper()
	return holdfast(t, env.Kubeconfig, args...)
}

func wantExit(t *testing.T, r run, code int, stderrHas ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r)
		}
	}
}

func mkNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
}

func mkUnit(t *testing.T, ns, name string, mode holdfastv1.AvailabilityMode, b *holdfastv1.RuntimeBinding, conds ...metav1.Condition) *holdfastv1.Unit {
	t.Helper()
	ctx := context.Background()
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": name},
			Availability: holdfastv1.Availability{Mode: mode, Targets: &holdfastv1.FailoverTargets{Nodes: []string{"standby-1"}}},
		},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	if b != nil || len(conds) > 0 {
		u.Status.RuntimeBinding = b
		for _, c := range conds {
			meta.SetStatusCondition(&u.Status.Conditions, c)
		}
		if err := env.Client.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func getUnit(t *testing.T, u *holdfastv1.Unit) *holdfastv1.Unit {
	t.Helper()
	var got holdfastv1.Unit
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// updateStatus writes a unit's status as the controller would, retrying on
// conflicts with the plugin's annotation patches.
func updateStatus(t *testing.T, u *holdfastv1.Unit, mutate func(*holdfastv1.Unit)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getUnit(t, u)
		mutate(cur)
		return env.Client.Status().Update(context.Background(), cur)
	})
	if err != nil {
		t.Errorf("writing the unit status: %v", err)
	}
}

// eventually polls until cond holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, what, poll.True(cond))
}

// start runs the binary in the background; the returned func waits for it.
func start(t *testing.T, kubeconfig string, args ...string) func() run {
	t.Helper()
	done := make(chan run, 1)
	go func() { done <- holdfast(t, kubeconfig, args...) }()
	return func() run {
		select {
		case r := <-done:
			return r
		case <-time.After(2 * time.Minute):
			t.Fatal("kubectl-holdfast did not exit")
			return run{}
		}
	}
}

// operator is a person in group plant-operators who may read holdfast's
// objects and nodes but change nothing: RBAC's refusal is a real one.
func operatorKubeconfig(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-test-viewer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{holdfastv1.GroupVersion.Group}, Resources: []string{"units", "voterswaps", "voterpolicies"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-test-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "plant-operators"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, o) })
	}
	_, path, err := env.UserConfig("olivia", "plant-operators")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

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

func TestSwapExitCodes(t *testing.T) {
	ctx := context.Background()
	for _, n := range []string{"sw-cp-1", "sw-cp-2", "sw-cp-3"} {
		mkNode(t, n, map[string]string{holdfastv1.LabelEtcdRole: "true"})
	}
	mkNode(t, "sw-edge-7", map[string]string{holdfastv1.LabelVoterEligible: "true"})
	mkNode(t, "sw-edge-8", nil)
	mkNode(t, "sw-edge-9", map[string]string{holdfastv1.LabelVoterEligible: "true", holdfastv1.LabelPinned: "true"})
	for _, n := range []string{"sw-cp-1", "sw-cp-2", "sw-cp-3", "sw-edge-7", "sw-edge-8", "sw-edge-9"} {
		setReady(t, n, true)
	}
	editNode(t, "sw-edge-7", func(n *corev1.Node) { n.Annotations[holdfastv1.AnnotationProvisioned] = "true" })

	swaps := func() []holdfastv1.VoterSwap {
		var l holdfastv1.VoterSwapList
		if err := env.Client.List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	before := len(swaps())

	// Usage errors and nodes that cannot take the role: 2, nothing sent.
	wantExit(t, admin(t, "swap"), plugin.ExitUsage, "want OUT [IN]")
	wantExit(t, admin(t, "swap", "a", "b", "c"), plugin.ExitUsage, "want OUT [IN]")
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-cp-1"), plugin.ExitUsage, "name two different nodes")
	wantExit(t, admin(t, "swap", "nope", "sw-edge-7"), plugin.ExitUsage, `node "nope" (OUT) not found`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "nope"), plugin.ExitUsage, `node "nope" (IN) not found`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-edge-8"), plugin.ExitUsage, `node "sw-edge-8" (IN) is not voter-eligible`, "holdfast.io/voter-eligible=true")
	wantExit(t, admin(t, "swap", "sw-cp-1", "sw-edge-9"), plugin.ExitUsage, `node "sw-edge-9" (IN) is pinned`)
	wantExit(t, admin(t, "swap", "sw-cp-1", "--bogus"), plugin.ExitUsage, "unknown flag")
	if n := len(swaps()); n != before {
		t.Fatalf("a refused usage created a VoterSwap: %d before, %d after", before, n)
	}

	// refused runs the plugin and wants exit 1 with exactly the gates listed,
	// each with its field path, and nothing created.
	refused := func(t *testing.T, args []string, header string, gates ...string) {
		t.Helper()
		r := admin(t, append([]string{"swap"}, args...)...)
		wantExit(t, r, plugin.ExitRefused, header)
		var got []string
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(l, "  - ") {
				got = append(got, strings.TrimPrefix(l, "  - "))
			}
		}
		if strings.Join(got, "\n") != strings.Join(gates, "\n") {
			t.Errorf("failing gates:\n%s\nwant:\n%s\n%s", strings.Join(got, "\n"), strings.Join(gates, "\n"), r)
		}
		if n := len(swaps()); n != before {
			t.Fatalf("a refused swap created a VoterSwap: %d before, %d after", before, n)
		}
	}

	// No VoterPolicy yet: the controller has not observed etcd.
	refused(t, []string{"sw-cp-1", "sw-edge-7"}, "swap sw-cp-1 -> sw-edge-7 refused: 1 gate fails now (nothing created):",
		`spec: no VoterPolicy "default": create it so the voter controller observes etcd before any swap`)

	policy := &holdfastv1.VoterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec:       holdfastv1.VoterPolicySpec{Etcd: holdfastv1.EtcdAccess{Endpoints: []string{"https://10.0.0.1:2379"}}},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, policy) })
	healthy := func() holdfastv1.VoterPolicyStatus {
		st := holdfastv1.VoterPolicyStatus{Voters: []string{"sw-cp-1", "sw-cp-2", "sw-cp-3"}, Leader: "sw-cp-2", ClusterID: "cafe0001"}
		meta.SetStatusCondition(&st.Conditions, cond(holdfastv1.ConditionEtcdHealthy, metav1.ConditionTrue, "AllVotersAnswer", "every voter answers"))
		return st
	}
	setPolicyStatus(t, healthy())

	// One case per kind of gate: each sets the cluster up, is refused with
	// exactly its reasons, and is undone.
	leaseRenew := time.Now()
	for _, tc := range []struct {
		name    string
		args    []string
		set     func() (undo func())
		header  string
		reasons []string
	}{
		{name: "another swap holds the Lease", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName,
					Annotations: map[string]string{holdfastv1.AnnotationSwapID: "20261130T020000Z-sw-cp-3-sw-edge-8", holdfastv1.AnnotationSwapNodes: "sw-cp-3,sw-edge-8"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holdfast-controller-1"), LeaseDurationSeconds: ptr.To[int32](600),
					RenewTime: &metav1.MicroTime{Time: leaseRenew}},
			}
			if err := env.Client.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
			return func() { _ = env.Client.Delete(ctx, l) }
		}, reasons: []string{"spec: the swap Lease kube-system/holdfast-voter-swap is held by holdfast-controller-1 until " +
			leaseRenew.Add(600*time.Second).UTC().Format(time.RFC3339) + "; one swap at a time"}},
		{name: "a status no voters role stamped (stale)", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			setPolicyStatusAged(t, healthy(), true)
			return func() { setPolicyStatus(t, healthy()) }
		}, reasons: []string{"status.observedTime: voter policy status carries no observation time; the voters role has not observed etcd (or predates observedTime)"}},
		{name: "a voter not Ready", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			setReady(t, "sw-cp-2", false)
			return func() { setReady(t, "sw-cp-2", true) }
		}, reasons: []string{"spec: voter sw-cp-2 is not Ready; swap once every voter's Node is Ready"}},
		{name: "the incoming node has a tombstone of this cluster", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-7", func(n *corev1.Node) {
				n.Annotations[holdfastv1.AnnotationTombstone] = `{"memberID":"8e9e05c52164694d","clusterID":"cafe0001"}`
			})
			return func() {
				editNode(t, "sw-edge-7", func(n *corev1.Node) { delete(n.Annotations, holdfastv1.AnnotationTombstone) })
			}
		}, reasons: []string{"spec.incoming: sw-edge-7 carries a tombstone of this cluster (holdfast.io/tombstone): its removed member is not finished to an agent yet"}},
		{name: "an even voter count", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			st := healthy()
			st.Voters = append(st.Voters, "sw-edge-8")
			setPolicyStatus(t, st)
			return func() { setPolicyStatus(t, healthy()) }
		}, reasons: []string{"spec: 4 voters where the target is 3; the voter set must be at its target before a swap"}},
		{name: "a node labelled a voter that does not vote", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-8", func(n *corev1.Node) { n.Labels[holdfastv1.LabelEtcdRole] = "true" })
			return func() { editNode(t, "sw-edge-8", func(n *corev1.Node) { delete(n.Labels, holdfastv1.LabelEtcdRole) }) }
		}, reasons: []string{"spec: node sw-edge-8 is labelled node-role.kubernetes.io/etcd but has no etcd member (member but not a voter); a voter is judged by etcd's own vote"}},
		{name: "the outgoing voter pinned", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-cp-1", func(n *corev1.Node) { n.Labels[holdfastv1.LabelPinned] = "true" })
			return func() { editNode(t, "sw-cp-1", func(n *corev1.Node) { delete(n.Labels, holdfastv1.LabelPinned) }) }
		}, reasons: []string{"spec.outgoing: sw-cp-1 is pinned (holdfast.io/pinned); an admin must unpin it first"}},
		{name: "the incoming node unprovisioned and not Ready", args: []string{"sw-cp-1", "sw-edge-7"}, set: func() func() {
			editNode(t, "sw-edge-7", func(n *corev1.Node) { delete(n.Annotations, holdfastv1.AnnotationProvisioned) })
			setReady(t, "sw-edge-7", false)
			return func() {
				editNode(t, "sw-edge-7", func(n *corev1.Node) { n.Annotations[holdfastv1.AnnotationProvisioned] = "true" })
				setReady(t, "sw-edge-7", true)
			}
		}, header: "swap sw-cp-1 -> sw-edge-7 refused: 2 gates fail now (nothing created):", reasons: []string{
			"spec.incoming: sw-edge-7 is not provisioned (no holdfast.io/provisioned annotation from its node plugin); install the server unit first",
			"spec.incoming: sw-edge-7 is not Ready",
		}},
		{name: "etcd unhealthy without a leader, a learner, OUT not a voter: each reason (dry run)",
			args: []string{"sw-edge-8", "sw-edge-7", "--dry-run"}, set: func() func() {
				st := healthy()
				st.Leader, st.Learners = "", []string{"sw-edge-8"}
				meta.SetStatusCondition(&st.Conditions, cond(holdfastv1.ConditionEtcdHealthy, metav1.ConditionFalse, "MemberUnreachable", "sw-cp-3 does not answer"))
				setPolicyStatus(t, st)
				return func() { setPolicyStatus(t, healthy()) }
			},
			header: "swap sw-edge-8 -> sw-edge-7 refused: 4 gates fail now (dry run, nothing created):",
			reasons: []string{
				"spec: etcd is not healthy (VoterPolicy condition EtcdHealthy MemberUnreachable: sw-cp-3 does not answer); swap once every voter answers",
				"spec: etcd reports no leader; swap once it has one",
				"spec: learner present (sw-edge-8); wait until it is promoted or removed",
				"spec.outgoing: sw-edge-8 is not an etcd voter (voters: sw-cp-1, sw-cp-2, sw-cp-3); name a current voter",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			undo := tc.set()
			defer undo()
			header := tc.header
			if header == "" {
				header = "swap sw-cp-1 -> sw-edge-7 refused: 1 gate fails now (nothing created):"
			}
			refused(t, tc.args, header, tc.reasons...)
		})
	}

	// A person RBAC does not allow to create swaps: refused, 1, with the reason.
	// The gates hold for them (the Lease they may not read is left to the
	// webhook, with a note).
	r := holdfast(t, operatorKubeconfig(t), "swap", "sw-cp-1", "sw-edge-7")
	wantExit(t, r, plugin.ExitRefused, "the swap Lease kube-system/holdfast-voter-swap is not readable", "the webhook judges it",
		"creating the VoterSwap: refused", `cannot create resource "voterswaps"`)

	// Every gate holds: a dry run says so and creates nothing.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--dry-run")
	wantExit(t, r, plugin.ExitOK)
	if !strings.Contains(r.stdout, "every gate holds") {
		t.Fatalf("dry run: %s", r)
	}
	if n := len(swaps()); n != before {
		t.Fatalf("--dry-run created a VoterSwap")
	}

	// Accepted: a Manual VoterSwap with the spec asked for.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--reason", "fsync p99 40ms")
	wantExit(t, r, plugin.ExitOK)
	var created *holdfastv1.VoterSwap
	for _, s := range swaps() {
		if s.Spec.Outgoing == "sw-cp-1" {
			created = &s
		}
	}
	if created == nil || created.Spec.Incoming != "sw-edge-7" || created.Spec.Reason != "fsync p99 40ms" ||
		created.Spec.Origin != holdfastv1.SwapManual || !strings.HasPrefix(created.Name, "swap-sw-cp-1-sw-edge-7-") ||
		!strings.Contains(r.stdout, "voterswap.holdfast.io/"+created.Name+" created") {
		t.Fatalf("created swap %+v\n%s", created, r)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, created) })

	// No IN: the scheduler picks; only OUT is checked.
	r = admin(t, "swap", "sw-cp-1")
	wantExit(t, r, plugin.ExitOK)
	if !strings.Contains(r.stdout, "sw-cp-1 -> (scheduler picks)") {
		t.Fatalf("%s", r)
	}

	// --wait follows the swap to its outcome, as the voter controller writes it.
	for _, tc := range []struct {
		final holdfastv1.SwapPhase
		code  int
		out   string
	}{
		{holdfastv1.SwapSucceeded, plugin.ExitOK, "phase Succeeded"},
		{holdfastv1.SwapRolledBack, plugin.ExitRefused, "RolledBack: Rollback Done LearnerStalled: learner did not catch up"},
	} {
		wait := start(t, env.Kubeconfig, "swap", "sw-cp-1", "sw-edge-7", "--wait", "--timeout", "1m")
		var s holdfastv1.VoterSwap
		eventually(t, 30*time.Second, "the waited swap", func() bool {
			for _, it := range swaps() {
				if it.Spec.Outgoing == "sw-cp-1" && it.Status.Phase == "" && it.Name != created.Name && it.Spec.Incoming == "sw-edge-7" {
					s = it
					return true
				}
			}
			return false
		})
		t.Cleanup(func() { _ = env.Client.Delete(ctx, &s) })
		s.Status = holdfastv1.VoterSwapStatus{Phase: holdfastv1.SwapRunning, Step: holdfastv1.StepPromote}
		if err := env.Client.Status().Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the waiter's output is read only at its end: give it time to see Running
		s.Status.Phase = tc.final
		s.Status.History = []holdfastv1.SwapStepRecord{{Step: holdfastv1.StepRollback, Outcome: "Done", Reason: "LearnerStalled", Message: "learner did not catch up", At: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		r := wait()
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.out) {
			t.Errorf("--wait for %s: want exit %d and %q, got %s", tc.final, tc.code, tc.out, r)
		}
	}

	// --wait that runs out of time: 4, and the swap stands.
	r = admin(t, "swap", "sw-cp-1", "sw-edge-7", "--wait", "--timeout", "2s")
	wantExit(t, r, plugin.ExitTimeout, "no outcome within 2s; the request stands")
}

func TestFailoverExitCodes(t *testing.T) {
	ns := env.Namespace(t)
	mkNode(t, "fo-edge-1", nil)
	mkNode(t, "fo-standby-1", nil)
	held := cond(holdfastv1.ConditionHeld, metav1.ConditionFalse, holdfastv1.ReasonRenewalAcknowledged, "ok")
	kiln := mkUnit(t, ns, "kiln-1", holdfastv1.Failover,
		&holdfastv1.RuntimeBinding{Node: "fo-edge-1", Epoch: 3, LeaseState: holdfastv1.LeaseHeld, LeaseStateEpoch: 3}, held)
	press := mkUnit(t, ns, "press-2", holdfastv1.Autonomy, &holdfastv1.RuntimeBinding{Node: "fo-edge-1", Epoch: 1}, held)

	wantExit(t, admin(t, "failover", "-n", ns, "kiln-1"), plugin.ExitUsage, "--to NODE is required")
	wantExit(t, admin(t, "failover", "-n", ns, "nope", "--to", "fo-standby-1"), plugin.ExitUsage, `unit "nope" not found in namespace `+ns)
	wantExit(t, admin(t, "failover", "-n", ns, "kiln-1", "--to", "nope"), plugin.ExitUsage, `node "nope" not found`)
	wantExit(t, admin(t, "failover", "-n", ns, "kiln-1", "--to", "fo-edge-1"), plugin.ExitUsage, "already bound to node fo-edge-1 at epoch 3")
	wantExit(t, admin(t, "failover", "-n", ns, "press-2", "--to", "fo-standby-1"), plugin.ExitUsage, "Autonomy unit", "--confirm-fenced REASON")
	if a := getUnit(t, kiln).Annotations; a[holdfastv1.AnnotationFailoverTo] != "" {
		t.Fatalf("a usage error changed the unit: %v", a)
	}

	// RBAC refuses a viewer: 1, with the apiserver's reason.
	wantExit(t, holdfast(t, operatorKubeconfig(t), "failover", "-n", ns, "kiln-1", "--to", "fo-standby-1"),
		plugin.ExitRefused, "refused", `cannot patch resource "units"`)

	// Accepted: the request annotations; a confirmation left from earlier is
	// removed when this person gives none.
	updateUnit(t, kiln, func(u *holdfastv1.Unit) {
		u.Annotations = map[string]string{holdfastv1.AnnotationFailoverConfirmFenced: "someone else's words"}
	})
	wantExit(t, admin(t, "failover", "-n", ns, "kiln-1", "--to", "fo-standby-1"), plugin.ExitOK)
	a := getUnit(t, kiln).Annotations
	if a[holdfastv1.AnnotationFailoverTo] != "fo-standby-1" || a[holdfastv1.AnnotationFailoverConfirmFenced] != "" {
		t.Fatalf("annotations after failover: %v", a)
	}
	wantExit(t, admin(t, "failover", "-n", ns, "press-2", "--to", "fo-standby-1", "--confirm-fenced", "powered off at the breaker"), plugin.ExitOK)
	a = getUnit(t, press).Annotations
	if a[holdfastv1.AnnotationFailoverTo] != "fo-standby-1" || a[holdfastv1.AnnotationFailoverConfirmFenced] != "powered off at the breaker" ||
		a[holdfastv1.AnnotationFailoverConfirmEpoch] != strconv.FormatInt(getUnit(t, press).Status.RuntimeBinding.Epoch, 10) {
		t.Fatalf("annotations after a confirmed failover: %v", a)
	}

	// --wait: the controller's refusal of the consumed request is 1 ...
	updateUnit(t, kiln, func(u *holdfastv1.Unit) { delete(u.Annotations, holdfastv1.AnnotationFailoverTo) })
	wait := start(t, env.Kubeconfig, "failover", "-n", ns, "kiln-1", "--to", "fo-standby-1", "--wait", "--timeout", "1m")
	eventually(t, 30*time.Second, "the request", func() bool { return getUnit(t, kiln).Annotations[holdfastv1.AnnotationFailoverTo] != "" })
	msg := "The runtime at epoch 3 on node fo-edge-1 holds its lease and may still be writing"
	updateStatus(t, kiln, func(u *holdfastv1.Unit) {
		meta.SetStatusCondition(&u.Status.Conditions, cond(holdfastv1.ConditionFailoverRequest, metav1.ConditionFalse, holdfastv1.ReasonRefused, msg))
	})
	updateUnit(t, kiln, func(u *holdfastv1.Unit) { delete(u.Annotations, holdfastv1.AnnotationFailoverTo) })
	wantExit(t, wait(), plugin.ExitRefused, "refused by the controller: "+msg)

	// ... and a new binding is 0.
	wait = start(t, env.Kubeconfig, "failover", "-n", ns, "press-2", "--to", "fo-standby-1", "--confirm-fenced", "cut from the field network", "--wait", "--timeout", "1m")
	eventually(t, 30*time.Second, "the request", func() bool {
		return getUnit(t, press).Annotations[holdfastv1.AnnotationFailoverConfirmFenced] == "cut from the field network"
	})
	updateStatus(t, press, func(u *holdfastv1.Unit) {
		u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 2, Pod: "press-2-runtime-e2"}
		meta.SetStatusCondition(&u.Status.Conditions, cond(holdfastv1.ConditionFailoverRequest, metav1.ConditionTrue, holdfastv1.ReasonRebound, "rebound"))
	})
	r := wait()
	if r.code != plugin.ExitOK || !strings.Contains(r.stdout, "re-bound at epoch 2: the scheduler places it on fo-standby-1") {
		t.Fatalf("--wait for a re-bind: %s", r)
	}
}

func updateUnit(t *testing.T, u *holdfastv1.Unit, mutate func(*holdfastv1.Unit)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getUnit(t, u)
		mutate(cur)
		return env.Client.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRestartExitCodes(t *testing.T) {
	ns := env.Namespace(t)
	running := mkUnit(t, ns, "kiln-1", holdfastv1.Failover, &holdfastv1.RuntimeBinding{Node: "e", Epoch: 1},
		cond(holdfastv1.ConditionHeld, metav1.ConditionFalse, holdfastv1.ReasonRenewalAcknowledged, "ok"))
	heldUnit := mkUnit(t, ns, "press-2", holdfastv1.Failover, &holdfastv1.RuntimeBinding{Node: "e", Epoch: 2},
		cond(holdfastv1.ConditionHeld, metav1.ConditionTrue, "ManualFailover", "Hold: a manual failover to node e was requested at epoch 1"))

	wantExit(t, admin(t, "restart", "-n", ns), plugin.ExitUsage, "want UNIT")
	wantExit(t, admin(t, "restart", "-n", ns, "nope"), plugin.ExitUsage, "not found")
	wantExit(t, admin(t, "restart", "-n", ns, running.Name), plugin.ExitUsage, "is not held (Held=False, RenewalAcknowledged)")
	if _, ok := getUnit(t, running).Annotations[holdfastv1.AnnotationRestart]; ok {
		t.Fatal("a refused restart annotated the unit")
	}

	// Accepted: an RFC 3339 time no earlier than the Hold.
	heldSince := meta.FindStatusCondition(getUnit(t, heldUnit).Status.Conditions, holdfastv1.ConditionHeld).LastTransitionTime
	wantExit(t, admin(t, "restart", "-n", ns, heldUnit.Name, "--wait", "--timeout", "1s"), plugin.ExitTimeout, "the request stands")
	at, err := time.Parse(time.RFC3339, getUnit(t, heldUnit).Annotations[holdfastv1.AnnotationRestart])
	if err != nil || at.Before(heldSince.Time) {
		t.Fatalf("restart annotation %v (err %v) must be an RFC 3339 time at or after the Hold at %v", at, err, heldSince)
	}

	// --wait ends when the controller clears the Hold: cleared once the
	// plugin has asked (its annotation is back), never before it looked.
	updateUnit(t, heldUnit, func(u *holdfastv1.Unit) { delete(u.Annotations, holdfastv1.AnnotationRestart) })
	wait := start(t, env.Kubeconfig, "restart", "-n", ns, heldUnit.Name, "--wait", "--timeout", "1m")
	eventually(t, 30*time.Second, "the restart request", func() bool {
		_, asked := getUnit(t, heldUnit).Annotations[holdfastv1.AnnotationRestart]
		return asked
	})
	updateStatus(t, heldUnit, func(u *holdfastv1.Unit) {
		meta.SetStatusCondition(&u.Status.Conditions, cond(holdfastv1.ConditionHeld, metav1.ConditionFalse, "Restarted", "restarted"))
	})
	r := wait()
	if r.code != plugin.ExitOK || !strings.Contains(r.stdout, "resumed: the Hold is cleared") {
		t.Fatalf("restart --wait: %s", r)
	}
}

func TestUnreachableClusterExits3(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// A loopback port nothing listens on.
	data := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]
current-context: c
`
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"swap", "a", "b"}, {"failover", "u", "--to", "n"}, {"restart", "u"}} {
		r := holdfast(t, kubeconfig, append(args, "--request-timeout", "5s")...)
		wantExit(t, r, plugin.ExitUnavailable)
	}
}

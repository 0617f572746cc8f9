//go:build integration

package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
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

func TestFailoverExitCodes(t *testing.T) {
	ns := env.Namespace(t)
	mkNode(t, "fo-edge-1", nil)
	mkNode(t, "fo-standby-1", nil)
	held := cond(holdfastv1.ConditionHeld, metav1.ConditionFalse, holdfastv1.ReasonRenewalAcknowledged, "ok")
	kiln := mkUnit(t, ns, "kiln-1", holdfastv1.Failover,
		&holdfastv1.RuntimeBinding{Node: "fo-edge-1", Epoch: 3, LeaseState: holdfastv1.LeaseHeld, LeaseStateEpoch: 3}, held)
	press := mkUnit(t, ns, "press-2", holdfastv1.Autonomy, &holdfastv1.RuntimeBinding{Node: "fo-edge-1", Epoch: 1, Pod: "press-2-runtime-e1"}, held)
	// press-2's runtime, restarted twice in its pod by the kubelet: the
	// process a confirmation names.
	pressPod := mkRuntimePod(t, ns, "press-2", 1, 2)

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
		a[holdfastv1.AnnotationFailoverConfirmEpoch] != strconv.FormatInt(getUnit(t, press).Status.RuntimeBinding.Epoch, 10) ||
		a[holdfastv1.AnnotationFailoverConfirmIncarnation] != string(pressPod.UID)+"/2" {
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

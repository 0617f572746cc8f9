//go:build integration

// Package integration runs the units role against the real kube-apiserver
// and etcd (test/testenv). It runs no kubelet and no holdfast-scheduler
// (test/e2e runs both), so the tests play both parts the way the real ones
// do: the scheduler records the node in the binding with an
// optimistic-concurrency write and binds the pod through the binding
// subresource; the kubelet reports the pod's IP and readiness.
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/app"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var (
	env *testenv.Env
	// The real binaries the process-level tests run, built into bin/test.
	unitRuntimeBinary, controllerBinary string
	// leaseCA is the cluster's lease CA, as the chart makes it, and
	// leaseCADir its directory as the units role mounts it: every
	// controller of these tests signs and grants with it, as every replica
	// of one installation does.
	leaseCA    *leasetlstest.CA
	leaseCADir string
)

func TestMain(m *testing.M) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := filepath.Join(root, "bin", "test")
	unitRuntimeBinary = filepath.Join(dir, "unit-runtime")
	controllerBinary = filepath.Join(dir, "holdfast-controller")
	for bin, pkg := range map[string]string{unitRuntimeBinary: "./cmd/unit-runtime", controllerBinary: "./cmd/holdfast-controller"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	if leaseCA, err = leasetlstest.MakeCA("holdfast-lease-ca"); err == nil {
		if leaseCADir, err = os.MkdirTemp("", "holdfast-lease-ca-"); err == nil {
			err = leasetlstest.WriteFiles(leaseCADir, leaseCA.DirFiles(nil))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "the lease CA: %v\n", err)
		os.Exit(1)
	}
	ctrl.SetLogger(klog.NewKlogr())
	testenv.Main(m, &env, testenv.Options{})
}

const electionNamespace = "holdfast-system"

// controller is one in-process units role.
type controller struct {
	cancel    context.CancelFunc
	done      chan struct{}
	ending    leadership.Ending
	err       error
	health    string
	auditPath string
	identity  string
}

type controllerOptions struct {
	// namespace scopes the controller to one test's Units.
	namespace  string
	identity   string
	electionID string
	// electionNS holds the election Lease and the epoch record; empty is
	// the shared holdfast-system.
	electionNS string
	standDown  time.Duration
	// clock drives the grantor and the decisions; nil is the real clock.
	clock clock.WithTicker
}

func ensureNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// startController runs the units role in this process until the test ends.
func startController(t testing.TB, o controllerOptions) *controller {
	t.Helper()
	if o.electionNS == "" {
		o.electionNS = electionNamespace
	}
	ensureNamespace(t, o.electionNS)
	if o.identity == "" {
		o.identity = "ctl-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	}
	if o.electionID == "" {
		o.electionID = "grantor-" + fmt.Sprint(time.Now().UnixNano())
	}
	c := &controller{done: make(chan struct{}), auditPath: filepath.Join(t.TempDir(), "audit.log"), identity: o.identity}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	started := make(chan struct{})
	go func() {
		defer close(c.done)
		c.ending, c.err = app.RunUnits(ctx, env.Config, app.UnitsConfig{
			Namespace: o.electionNS, ElectionID: o.electionID, Identity: o.identity,
			Timings: policy.DefaultGrantorTimings(), StandDown: o.standDown, Clock: o.clock,
			HealthAddr: "127.0.0.1:0", MetricsAddr: "0", AuditPath: c.auditPath, WatchNamespace: o.namespace,
			LeaseCADir: leaseCADir,
			Started:    func(h, _ string) { c.health = h; close(started) },
		})
	}()
	select {
	case <-started:
	case <-c.done:
		t.Fatalf("the units role did not start: %v", c.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the units role did not start")
	}
	t.Cleanup(c.stop)
	return c
}

func (c *controller) stop() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
	}
}

// auditLines reads the controller's audit trail.
func (c *controller) auditLines(t testing.TB) []audit.Record {
	t.Helper()
	f, err := os.Open(c.auditPath)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line is not JSON: %v: %q", err, sc.Text())
		}
		out = append(out, r)
	}
	return out
}

func auditReasons(recs []audit.Record, unit string) []string {
	var out []string
	for _, r := range recs {
		if r.Object.Key() == unit {
			out = append(out, r.Reason)
		}
	}
	return out
}

// node creates a Ready node with labels.
func node(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.Client.Create(ctx, n); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
	}
	// A simulated kubelet may write the new Node's status meanwhile: the
	// Ready condition goes on the Node as it is now.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return env.Client.Status().Update(ctx, n)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
}

func getUnit(t testing.TB, key types.NamespacedName) *holdfastv1.Unit {
	t.Helper()
	var u holdfastv1.Unit
	if err := env.Client.Get(context.Background(), key, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

func runtimePod(t testing.TB, u *holdfastv1.Unit, epoch int64) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: u.Namespace, Name: units.PodName(u.Name, epoch)}, &p); err != nil {
		return nil
	}
	return &p
}

// waitNewEpoch waits for the unit's binding to be above after and returns
// its epoch: the controller draws epochs from its clock and the cluster's
// epoch record (L13), so a test learns them rather than counting 1, 2, 3.
func waitNewEpoch(t testing.TB, key types.NamespacedName, after int64) int64 {
	t.Helper()
	var e int64
	poll.Until(t, 20*time.Second, fmt.Sprintf("a binding above epoch %d", after), func() (bool, string) {
		var u holdfastv1.Unit
		if err := env.Client.Get(context.Background(), key, &u); err != nil {
			return false, err.Error()
		}
		if b := u.Status.RuntimeBinding; b != nil && b.Epoch > after {
			e = b.Epoch
			return true, ""
		}
		return false, fmt.Sprintf("%+v", u.Status.RuntimeBinding)
	})
	return e
}

// schedule plays holdfast-scheduler: UnitPlacement's Bind judges the pod
// by its unit's binding (policy.BindingClaim) and records the node and the
// pod in the binding with an optimistic-concurrency write, then binds the
// pod through the binding subresource.
func schedule(t testing.TB, key types.NamespacedName, epoch int64, nodeName string) {
	t.Helper()
	ctx := context.Background()
	// The scheduler sees a runtime pod once the controller has created it,
	// which it does after it writes the binding.
	pod := &corev1.Pod{}
	podKey := types.NamespacedName{Namespace: key.Namespace, Name: units.PodName(key.Name, epoch)}
	poll.Until(t, 20*time.Second, "the runtime pod "+podKey.String(), func() (bool, string) {
		err := env.Client.Get(ctx, podKey, pod)
		return err == nil, fmt.Sprint(err)
	})
	podEpoch, err := holdfastv1.ParseEpoch(pod.Labels[holdfastv1.LabelEpoch])
	if err != nil {
		t.Fatalf("pod %s: no valid %s label: %v", pod.Name, holdfastv1.LabelEpoch, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var u holdfastv1.Unit
		if err := env.Client.Get(ctx, key, &u); err != nil {
			return err
		}
		b := u.Status.RuntimeBinding
		if reason := policy.BindingClaim(b, key.String(), podEpoch, pod.Name); reason != "" {
			return errors.New(reason)
		}
		if b.Node == nodeName {
			return nil // recorded by an earlier attempt
		}
		b.Node, b.Pod = nodeName, pod.Name
		now := metav1.Now()
		b.BoundAt = &now
		return env.Client.Status().Update(ctx, &u)
	})
	if err != nil {
		t.Fatalf("recording node %s for pod %s: %v", nodeName, pod.Name, err)
	}
	if err := env.Client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
	}); err != nil {
		t.Fatalf("binding pod %s to %s: %v", pod.Name, nodeName, err)
	}
}

// kubeletReports plays the kubelet: the pod is running at ip, ready or not.
func kubeletReports(t testing.TB, ns, name, ip string, ready bool, restarts int32) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.HostIP = ip, ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: holdfastv1.RuntimeContainer, Image: p.Spec.Containers[0].Image, Ready: ready, RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
		return env.Client.Status().Update(ctx, &p)
	})
	if err != nil {
		t.Fatalf("reporting pod status: %v", err)
	}
}

// events lists the Events regarding the unit, oldest first.
func events(t testing.TB, u *holdfastv1.Unit) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(u.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Unit" && e.Regarding.Name == u.Name {
			out = append(out, e)
		}
	}
	return out
}

func eventReasons(evs []eventsv1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

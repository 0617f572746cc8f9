//go:build integration || e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// partitionCase is how long a control-plane partition lasts: a number of
// the unit's leases or a fixed time from the cut, or until kube-controller-manager has declared the node
// NotReady and evicted its pods (the apiserver's eviction delay,
// cluster.Cluster.EvictionSeconds, after the node lifecycle controller's
// grace).
type partitionCase struct {
	name         string
	leases       int
	lasts        time.Duration
	untilEvicted bool
	// evicts: the node lifecycle controller evicts a bystander's pod before
	// the partition ends.
	evicts bool
}

// TestControlPlanePartitionFailsOverWithTheFieldOpen: the primary's node is
// cut from the control network only (cluster.Node.Partition(Control): the
// apiserver, the grantor and the broker are gone both ways) while its field
// link stays open, so the stale runtime can reach its device for the whole
// partition; this is the partition the control lease exists for. The lease
// expires, the Hold is recorded, epoch 2 holds on the standby after the
// margin. For the partitions long enough, kube-controller-manager declares
// the node NotReady, taints it and evicts a bystander Deployment's pod there,
// but never the runtime pods (they tolerate it: only holdfast moves a unit).
// Throughout, the Unit's status stays true (statusWatch). Healed, the old
// runtime is fenced and then stopped, and the device, read by true time and
// peer, saw one writer at a time: in plain mode nothing but the runtime's
// own fence kept the old one off it.
func TestControlPlanePartitionFailsOverWithTheFieldOpen(t *testing.T) {
	for _, pc := range controlPartitions {
		t.Run(pc.name, func(t *testing.T) {
			d := newDrill(t, "control-"+pc.name, 0)
			d.controlPartition(pc)
		})
	}
}

func (d *drill) controlPartition(pc partitionCase) {
	d.t.Helper()
	b1, a := d.heldPastHoldOff()
	if pc.leases > 0 {
		pc.lasts = time.Duration(pc.leases) * a.LeaseDuration()
	}
	node := world.Nodes[b1.Node]
	by := d.bystander(b1.Node)
	watch := d.watchStatus(b1.Epoch, b1.Node, by)
	cutAt := time.Now()
	heal := d.partition(node, cluster.Control)
	if pc.lasts > 0 {
		timer := time.AfterFunc(pc.lasts, func() { heal() })
		d.t.Cleanup(func() { timer.Stop() })
	}
	b2 := d.held(2)
	d.failoverTime(cutAt, b2)
	if b2.Node == b1.Node {
		d.t.Fatalf("epoch %d bound to the partitioned node %s", b2.Epoch, b2.Node)
	}
	if b2.Expiry == nil || b2.Expiry.Epoch != b1.Epoch || b2.Expiry.Verdict != holdfastv1.VerdictSelfFenced {
		d.t.Fatalf("expiry record after the re-bind: %+v", b2.Expiry)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound, evLeaseReestablished)
	switch {
	case pc.untilEvicted:
		watch.waitEvicted(d, 2*time.Duration(world.EvictionSeconds)*time.Second+3*time.Minute)
		heal()
	case pc.lasts > 0:
		select {
		case <-d.ctx.Done():
			d.t.Fatal(d.ctx.Err())
		case <-time.After(time.Until(cutAt.Add(pc.lasts))):
		}
		heal()
	}
	d.t.Logf("partition of %s's control link: %v (healed %s after the cut)", b1.Node, pc.name, heal().Sub(cutAt).Round(100*time.Millisecond))
	if pc.evicts {
		watch.waitEvicted(d, 0)
	}
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, b2.Epoch)
	d.oneWriter(b1.Epoch, b2.Epoch)
	if err := world.WaitNodeReady(d.ctx, b1.Node, 3*time.Minute); err != nil {
		d.t.Fatal(err)
	}
	watch.stop(d, cutAt)
}

// bystander runs an ordinary Deployment's pod on node (one replica, the
// default scheduler, no tolerations of its own): what kube-controller-manager
// evicts from a node that stays unreachable, unlike a unit's runtime. It
// returns the pod's name.
func (d *drill) bystander(node string) string {
	d.t.Helper()
	labels := map[string]string{"app": "bystander"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.u.Key.Namespace, Name: "bystander"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: node},
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers:                    []corev1.Container{{Name: "pause", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}
	if err := world.Client.Create(d.ctx, dep); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() {
		if err := world.Client.Delete(context.Background(), dep); client.IgnoreNotFound(err) != nil {
			d.t.Error(err)
		}
	})
	var pod corev1.Pod
	if err := poll(d.ctx, 2*time.Minute, func() bool {
		var pods corev1.PodList
		if world.Client.List(d.ctx, &pods, client.InNamespace(dep.Namespace), client.MatchingLabels(labels)) != nil {
			return false
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				pod = p
				return true
			}
		}
		return false
	}); err != nil {
		d.t.Fatalf("the bystander never ran on %s", node)
	}
	return pod.Name
}

// statusWatch reads the Unit, the partitioned node and the bystander's pod
// every half second while a partition lasts, and holds the Unit's status
// to the truth at every reading:
//   - its epoch never goes back;
//   - no epoch after the first is bound to the partitioned node;
//   - once an epoch after the first holds its lease, the binding stays there, at
//     that epoch, held, on that node (nothing that happens to the other
//     node touches it);
//   - once the node was seen NotReady, no reading shows the first epoch
//     holding;
//   - RuntimeReady, when True, names the current binding's pod;
//   - FailoverSuspended is never True (a standby was free throughout).
type statusWatch struct {
	node, bystander string
	// first is the partitioned node's binding's epoch.
	first int64

	mu          sync.Mutex
	done        chan struct{}
	wg          sync.WaitGroup
	violations  []string
	readings    int
	maxEpoch    int64
	held        *holdfastv1.RuntimeBinding
	notReadyAt  time.Time
	taintedAt   time.Time
	evictedAt   time.Time
	evictedNote string
}

func (d *drill) watchStatus(first int64, node, bystander string) *statusWatch {
	w := &statusWatch{node: node, bystander: bystander, first: first, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			w.read(d)
			select {
			case <-w.done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *statusWatch) read(d *drill) {
	u, uerr := d.u.Get(d.ctx)
	var n corev1.Node
	nerr := world.Client.Get(d.ctx, client.ObjectKey{Name: w.node}, &n)
	var pod corev1.Pod
	perr := world.Client.Get(d.ctx, client.ObjectKey{Namespace: d.u.Key.Namespace, Name: w.bystander}, &pod)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := func(f string, a ...any) {
		w.violations = append(w.violations, now.Format(time.StampMilli)+": "+fmt.Sprintf(f, a...))
	}
	if nerr == nil {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue && w.notReadyAt.IsZero() {
				w.notReadyAt = now
			}
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute && w.taintedAt.IsZero() {
				w.taintedAt = now
			}
		}
	}
	if perr == nil && !pod.DeletionTimestamp.IsZero() && w.evictedAt.IsZero() {
		w.evictedAt = now
	}
	if uerr != nil {
		return
	}
	w.readings++
	b := u.Status.RuntimeBinding
	if b == nil {
		bad("no binding")
		return
	}
	if b.Epoch < w.maxEpoch {
		bad("the binding went back from epoch %d to %d", w.maxEpoch, b.Epoch)
	}
	w.maxEpoch = max(w.maxEpoch, b.Epoch)
	if b.Epoch > w.first && b.Node == w.node {
		bad("epoch %d bound to the partitioned node %s", b.Epoch, b.Node)
	}
	heldNow := b.LeaseState == holdfastv1.LeaseHeld && b.LeaseStateEpoch == b.Epoch
	switch {
	case w.held != nil && (b.Epoch != w.held.Epoch || b.Node != w.held.Node || !heldNow):
		bad("the binding left epoch %d held on %s: epoch %d on %s, lease %s (of epoch %d)", w.held.Epoch, w.held.Node, b.Epoch, b.Node, b.LeaseState, b.LeaseStateEpoch)
	case w.held == nil && b.Epoch > w.first && heldNow:
		w.held = b.DeepCopy()
	}
	if !w.notReadyAt.IsZero() && b.Epoch == w.first && heldNow {
		bad("epoch %d on %s reads held after its node was seen NotReady at %s", b.Epoch, b.Node, w.notReadyAt.Format(time.StampMilli))
	}
	for _, c := range u.Status.Conditions {
		switch {
		case c.Type == holdfastv1.ConditionRuntimeReady && c.Status == metav1.ConditionTrue && !strings.Contains(c.Message, b.Pod):
			bad("RuntimeReady True for another pod than the binding's %s: %s", b.Pod, c.Message)
		case c.Type == holdfastv1.ConditionFailoverSuspended && c.Status == metav1.ConditionTrue:
			bad("FailoverSuspended: %s", c.Message)
		}
	}
}

// waitEvicted waits (timeout > 0) or checks (timeout 0) that the node was
// seen NotReady and tainted unreachable and the bystander's pod evicted by
// kube-controller-manager's taint manager, and that no runtime pod was.
func (w *statusWatch) waitEvicted(d *drill, timeout time.Duration) {
	d.t.Helper()
	evicted := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.notReadyAt.IsZero() && !w.taintedAt.IsZero() && !w.evictedAt.IsZero()
	}
	if timeout > 0 {
		if err := poll(d.ctx, timeout, evicted); err != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			d.t.Fatalf("%s: NotReady at %v, tainted at %v, bystander evicted at %v: not all seen within %v", w.node, w.notReadyAt, w.taintedAt, w.evictedAt, timeout)
		}
	} else if !evicted() {
		d.t.Fatalf("%s: NotReady at %v, tainted at %v, bystander evicted at %v: the partition ended before all were seen", w.node, w.notReadyAt, w.taintedAt, w.evictedAt)
	}
	var evs eventsv1.EventList
	if err := world.Client.List(d.ctx, &evs, client.InNamespace(d.u.Key.Namespace)); err != nil {
		d.t.Fatal(err)
	}
	byTaintManager := false
	for _, e := range evs.Items {
		if e.Reason != "TaintManagerEviction" {
			continue
		}
		switch name := e.Regarding.Name; {
		case name == w.bystander:
			byTaintManager = true
			w.mu.Lock()
			w.evictedNote = e.Note
			w.mu.Unlock()
		case strings.HasPrefix(name, d.u.Key.Name+"-runtime-"):
			d.t.Fatalf("the taint manager evicted the runtime pod %s: %s", name, e.Note)
		}
	}
	if !byTaintManager {
		d.t.Fatalf("the bystander %s was deleted, but by no TaintManagerEviction", w.bystander)
	}
}

// stop ends the watch and fails the drill on any reading that was not true.
func (w *statusWatch) stop(d *drill, cutAt time.Time) {
	d.t.Helper()
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Sub(cutAt).Round(100 * time.Millisecond).String()
	}
	d.t.Logf("node lifecycle of %s from the cut: NotReady %s, tainted unreachable %s, bystander evicted %s (%s); %d Unit readings",
		w.node, since(w.notReadyAt), since(w.taintedAt), since(w.evictedAt), w.evictedNote, w.readings)
	if len(w.violations) > 0 {
		d.t.Fatalf("the Unit's status was not true at %d of %d readings:\n%s", len(w.violations), w.readings, strings.Join(w.violations, "\n"))
	}
	if w.held == nil {
		d.t.Fatalf("no reading saw an epoch after %d holding", w.first)
	}
}

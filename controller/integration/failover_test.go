//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
)

// plant is one test's cluster corner: a Failover unit whose real runtime
// drives a real Modbus TCP device, a primary node and standbys, and an
// in-process units role scoped to the test's namespace.
type plant struct {
	t       *testing.T
	ns      string
	k       *kubelet
	dev     *devicesim.Sim
	c       *controller
	u       *holdfastv1.Unit
	key     types.NamespacedName
	primary string
	targets []string
	// epochs are the unit's bindings' epochs in order, as waitPod saw them
	// (the controller draws them from its clock and the cluster's epoch
	// record, L13): the helpers name a binding by its place, 1 for the
	// first.
	epochs []int64
}

// epoch is the n-th binding's epoch; waitPod(n) learns it.
func (p *plant) epoch(n int) int64 {
	p.t.Helper()
	if n < 1 || n > len(p.epochs) {
		p.t.Fatalf("binding %d not seen yet (seen %v)", n, p.epochs)
	}
	return p.epochs[n-1]
}

// plantStartupGrace is a plant's start-up grace (seconds); a start-up
// failure takes failedStartupGrace. plantStartupWait is how long a test
// waits for a runtime to start and hold: past the grace, so a slow start
// on a loaded machine ends in one state or the other, never in the wait.
const (
	plantStartupGrace  = 60
	failedStartupGrace = 10
	plantStartupWait   = (plantStartupGrace + 30) * time.Second
)

// Lease 10s (hold bound 5s) and margin 5s, the smallest the CRD admits, so
// the drills run in seconds, and a start-up grace of plantStartupGrace. The
// controller runs the shipped timings, whose lease floor is 30s: a Failover
// plant is a unit admitted before the floor was raised (L14), reported
// LeaseBelowFloor first and run as it is.
func newPlant(t *testing.T, standbys ...string) *plant {
	t.Helper()
	return newPlantWith(t, func(*holdfastv1.Unit) {}, standbys...)
}

// newPlantWith is newPlant with the unit changed by mutate before it is
// created.
func newPlantWith(t *testing.T, mutate func(*holdfastv1.Unit), standbys ...string) *plant {
	t.Helper()
	return newPlantOn(t, controllerOptions{}, mutate, standbys...)
}

// newPlantOn is newPlantWith with the units role started with o (its
// namespace is the plant's).
func newPlantOn(t *testing.T, o controllerOptions, mutate func(*holdfastv1.Unit), standbys ...string) *plant {
	t.Helper()
	ns := env.Namespace(t)
	dev, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", EpochRegister: devicesim.DefaultEpochRegister})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	p := &plant{t: t, ns: ns, dev: dev, k: newKubelet(t, ns), primary: ns + "-edge"}
	p.k.node(p.primary, map[string]string{"holdfast.io/device": ns})
	for _, s := range standbys {
		p.targets = append(p.targets, ns+"-"+s)
		p.k.node(ns+"-"+s, nil)
	}
	o.namespace = ns
	p.c = startController(t, o)
	p.u = &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", Args: runtimeArgs(dev.Addr()), HealthPort: 9440, LeasePort: 9443},
			NodeSelector: map[string]string{"holdfast.io/device": ns},
			// The start-up grace is well past the lease: on a loaded machine
			// a runtime process may take longer than the lease to start and
			// take its first grant, and a binding whose runtime did not is
			// failed over (StartupFailed) while the test waits for it to
			// hold. The tests of a start-up failure set their own.
			Availability: holdfastv1.Availability{
				Mode: holdfastv1.Failover, LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: plantStartupGrace, RebindMarginSeconds: ptr.To(int32(5)),
				Targets: &holdfastv1.FailoverTargets{Nodes: p.targets}, Colocation: holdfastv1.ColocationWarn,
			},
		},
	}
	mutate(p.u)
	if err := env.Client.Create(context.Background(), p.u); err != nil {
		t.Fatal(err)
	}
	p.key = types.NamespacedName{Namespace: ns, Name: "kiln"}
	return p
}

func (p *plant) unit() *holdfastv1.Unit { return getUnit(p.t, p.key) }

// waitPod waits for the n-th binding and its runtime pod: the binding seen
// after the (n-1)-th.
func (p *plant) waitPod(n int) {
	p.t.Helper()
	var after int64
	if n > 1 {
		after = p.epoch(n - 1)
	}
	poll.Until(p.t, 60*time.Second, fmt.Sprintf("runtime pod of binding %d", n), func() (bool, string) {
		b := p.unit().Status.RuntimeBinding
		if b == nil || b.Epoch <= after || (n <= len(p.epochs) && b.Epoch != p.epochs[n-1]) {
			return false, fmt.Sprintf("binding %+v", b)
		}
		return runtimePod(p.t, p.u, b.Epoch) != nil, fmt.Sprintf("no pod of binding %+v", b)
	})
	if n > len(p.epochs) {
		p.epochs = append(p.epochs, p.unit().Status.RuntimeBinding.Epoch)
	}
}

// place plays the scheduler for the n-th binding: the primary for the
// first, else the first target that is neither the node being left nor in
// the ledger (UnitPlacement's rule).
func (p *plant) place(n int) string {
	p.t.Helper()
	p.waitPod(n)
	b := p.unit().Status.RuntimeBinding
	node := p.primary
	if n > 1 {
		node = ""
		for _, t := range p.targets {
			if t != b.PreviousNode && !slices.Contains(b.UnsettledRebinds, t) {
				node = t
				break
			}
		}
		if node == "" {
			p.t.Fatalf("no untried target for binding %d: %+v", n, b)
		}
	}
	schedule(p.t, p.key, p.epoch(n), node)
	return node
}

func (p *plant) waitLease(n int, state holdfastv1.LeaseState, within time.Duration) {
	p.t.Helper()
	epoch := p.epoch(n)
	poll.Until(p.t, within, fmt.Sprintf("lease %s at epoch %d", state, epoch), func() (bool, string) {
		b := p.unit().Status.RuntimeBinding
		return b != nil && b.Epoch == epoch && b.LeaseState == state && b.LeaseStateEpoch == epoch, fmt.Sprintf("%+v", b)
	})
}

func (p *plant) waitWrites(n int) {
	p.t.Helper()
	epoch := p.epoch(n)
	poll.Until(p.t, 20*time.Second, fmt.Sprintf("accepted device writes at epoch %d", epoch), func() (bool, string) {
		return len(devicesim.ByEpoch(p.dev.Writes())[epoch]) >= 3, fmt.Sprintf("epochs %v", devicesim.Epochs(p.dev.Writes()))
	})
}

// eventReasons are the unit's Event reasons in order, a repeated
// LeaseBelowFloor counted once: that report's Event goes out before its
// status write, and a write that loses to the scheduler's record of the
// node is decided, and reported, again. The audit lines, written after the
// status, hold it once.
func (p *plant) eventReasons() []string {
	got := eventReasons(events(p.t, p.u))
	return slices.CompactFunc(got, func(a, b string) bool { return a == b && a == units.EventLeaseBelowFloor })
}

func (p *plant) waitEvents(want []string) {
	p.t.Helper()
	if floor, _ := policy.DefaultGrantorTimings().LeaseFloor(); p.u.Spec.Availability.Mode == holdfastv1.Failover && p.u.Spec.Availability.LeaseDuration() < floor {
		want = append([]string{units.EventLeaseBelowFloor}, want...)
	}
	poll.Until(p.t, 15*time.Second, "events "+strings.Join(want, ","), func() (bool, string) {
		got := p.eventReasons()
		return slices.Equal(got, want), strings.Join(got, ",")
	})
	if got := auditReasons(p.c.auditLines(p.t), p.ns+"/kiln"); !slices.Equal(got, want) {
		p.t.Fatalf("audit reasons %v, want %v", got, want)
	}
}

// checkOneWriter reads the device's own write log: in the order the device
// took them, epochs never go back, and the new binding's first write comes
// after the old one's last by at least the margin.
func (p *plant) checkOneWriter(oldN, newN int) {
	p.t.Helper()
	old, new := p.epoch(oldN), p.epoch(newN)
	log := p.dev.Writes()
	if err := devicesim.CheckOneWriter(log); err != nil {
		p.t.Fatalf("two writers on the device: %v", err)
	}
	by := devicesim.ByEpoch(log)
	if len(by[old]) == 0 || len(by[new]) == 0 {
		p.t.Fatalf("expected writes at epochs %d and %d, got %v", old, new, devicesim.Epochs(log))
	}
	last, first := by[old][len(by[old])-1].Time, by[new][0].Time
	if gap := first.Sub(last); gap < p.u.Spec.Availability.RebindMargin() {
		p.t.Fatalf("epoch %d wrote %v after epoch %d's last write: the new writer started inside the margin", new, gap, old)
	}
}

// primaryLoss holds the primary, then loses its runtime to sig with its
// node's kubelet cut off, and follows the automatic failover to epoch 2.
func primaryLoss(t *testing.T, sig syscall.Signal, wantAttempt holdfastv1.RenewalOutcome) {
	p := newPlant(t, "standby-1")
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(1)
	old := p.k.proc(units.PodName("kiln", p.epoch(1)))

	p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
	if err := old.signal(sig); err != nil {
		t.Fatal(err)
	}
	p.waitPod(2)
	u := p.unit()
	b := u.Status.RuntimeBinding
	if b.Origin != holdfastv1.OriginAutomatic || b.PreviousNode != p.primary || !b.LeaseStateCarried() ||
		b.Expiry == nil || b.Expiry.Epoch != p.epoch(1) || b.Expiry.Verdict != holdfastv1.VerdictSelfFenced || b.Expiry.LastAttempt != wantAttempt {
		t.Fatalf("binding after the re-bind: %+v expiry %+v", b, b.Expiry)
	}
	if c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionHeld); c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonRuntimeLost {
		t.Fatalf("Held %+v", c)
	}
	p.waitEvents([]string{units.EventLeaseEstablished, units.EventLeaseExpired, units.EventHold, units.EventRebound})
	// The margin runs from the grantor's deadline, the last acknowledged
	// renewal (named by the LeaseExpired Event) + the lease; the record is
	// that instant rounded up to the second.
	var deadline time.Time
	for _, e := range events(t, p.u) {
		if e.Reason == units.EventLeaseExpired && deadline.IsZero() {
			_, rest, _ := strings.Cut(e.Note, "no renewal acknowledged since ")
			s, _, _ := strings.Cut(rest, " (")
			last, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatalf("the LeaseExpired Event names no last acknowledged renewal: %q", e.Note)
			}
			deadline = last.Add(p.u.Spec.Availability.LeaseDuration())
			if at := b.Expiry.At.Time; deadline.After(at) || at.Sub(deadline) >= time.Second {
				t.Fatalf("the expiry is recorded at %v, not the grantor's deadline %v rounded up", at, deadline)
			}
		}
		if e.Reason == units.EventRebound {
			if d := e.EventTime.Sub(deadline); deadline.IsZero() || d < p.u.Spec.Availability.RebindMargin() {
				t.Fatalf("re-bound %v after the grantor's deadline %v, inside the margin", d, deadline)
			}
		}
	}

	p.place(2)
	p.waitLease(2, holdfastv1.LeaseHeld, plantStartupWait)
	p.waitWrites(2)
	p.waitEvents([]string{units.EventLeaseEstablished, units.EventLeaseExpired, units.EventHold, units.EventRebound, units.EventLeaseReestablished})

	if sig == syscall.SIGSTOP {
		// The frozen runtime wakes long past its deadline and the hold,
		// with every grant the grantor POSTed while it was stopped waiting
		// in its socket (the attempts timed out: LastAttempt Unreachable
		// above). It reads them at once on waking; they carry the anchor
		// of the last reply it sent before it stopped, so none extends it
		// (L1): it is fenced by its own clock, stays fenced and
		// writes nothing.
		// The grantor's attempts were taken into the socket and timed
		// out (a refused connection would not queue anything).
		if !strings.HasPrefix(b.Expiry.Message, "no answer within") {
			t.Fatalf("the last attempt at the stopped runtime: %q, want a POST that got no answer", b.Expiry.Message)
		}
		if err := old.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the woken runtime's log:\n%s", old.log())
			}
		})
		var st leaseapi.Status
		poll.Until(t, 10*time.Second, "the woken runtime to answer", func() (bool, string) {
			var err error
			st, err = old.leaseStatus()
			return err == nil, fmt.Sprint(err)
		})
		woke := time.Now()
		// Well past the instant it read the grants from its socket, and
		// fifteen scans at 200ms.
		for {
			if !st.Fenced || st.State != leaseapi.Fenced || st.Epoch != p.epoch(1) {
				rem := "none"
				if st.RemainingMillis != nil {
					rem = fmt.Sprintf("%dms", *st.RemainingMillis)
				}
				t.Fatalf("%v after SIGCONT the woken runtime reports %s (fenced %v, epoch %d, %s to its deadline, last grant %s/%d), want Fenced at epoch %d",
					time.Since(woke).Round(time.Millisecond), st.State, st.Fenced, st.Epoch, rem, st.LastGrantor, st.LastSeq, p.epoch(1))
			}
			if time.Since(woke) > 3*time.Second {
				break
			}
			time.Sleep(100 * time.Millisecond)
			var err error
			if st, err = old.leaseStatus(); err != nil {
				t.Fatalf("the woken runtime stopped answering: %v", err)
			}
		}
		// The device's own log: no write of the first binding, accepted
		// or refused, after the second's first.
		log := p.dev.Writes()
		first, ok := time.Time{}, false
		for _, w := range log {
			if w.Epoch == p.epoch(2) && w.Accepted {
				first, ok = w.Time, true
				break
			}
		}
		if !ok {
			t.Fatalf("no accepted write at epoch %d in the device's log", p.epoch(2))
		}
		for _, w := range log {
			if w.Epoch == p.epoch(1) && w.Time.After(first) {
				t.Fatalf("the device saw a write of epoch %d at %s (accepted %v), after epoch %d's first at %s: %+v",
					w.Epoch, w.Time.Format(time.RFC3339Nano), w.Accepted, p.epoch(2), first.Format(time.RFC3339Nano), w)
			}
		}
	}
	p.checkOneWriter(1, 2)
}

// TestSIGSTOPOfThePrimaryRuntimeFailsOverAfterTheMargin: the primary's real
// runtime is frozen (the kernel takes the grantor's connections and POSTs
// into its socket, and nothing answers): Expired (SelfFenced, Unreachable),
// the Hold, the re-bind with epoch 2 after the margin, the standby's
// runtime takes the lease; then the frozen one wakes, reads every grant
// queued in its socket, and is Fenced and stays Fenced (L1: the grants
// carry its own anchor from before the stall). The device's log shows one
// writer at a time, and no write of epoch 1 after epoch 2's first.
func TestSIGSTOPOfThePrimaryRuntimeFailsOverAfterTheMargin(t *testing.T) {
	t.Parallel()
	primaryLoss(t, syscall.SIGSTOP, holdfastv1.RenewalUnreachable)
}

// TestSIGKILLOfThePrimaryRuntimeFailsOverAfterTheMargin: the primary's node
// loses power (the runtime killed, its kubelet gone): the same road.
func TestSIGKILLOfThePrimaryRuntimeFailsOverAfterTheMargin(t *testing.T) {
	t.Parallel()
	primaryLoss(t, syscall.SIGKILL, holdfastv1.RenewalUnreachable)
}

// TestAReplacementThatNeverAnswersIsStartupFailedThenTheNextStandbyThenSuspended:
// both standbys cannot start the runtime; each is tried once (StartupFailed
// after the start-up grace, not the lease), then the automatic path
// suspends with the last pod left in place, and when that pod's runtime
// finally answers, its first renewal lifts the suspension and settles the
// ledger.
func TestAReplacementThatNeverAnswersIsStartupFailedThenTheNextStandbyThenSuspended(t *testing.T) {
	t.Parallel()
	p := newPlantWith(t, func(u *holdfastv1.Unit) { u.Spec.Availability.RuntimeStartupGraceSeconds = failedStartupGrace }, "standby-1", "standby-2")
	for _, n := range p.targets {
		p.k.setNode(n, func(s *simNode) { s.broken = true })
	}
	p.place(1)
	p.waitLease(1, holdfastv1.LeaseHeld, plantStartupWait)
	p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
	if err := p.k.proc(units.PodName("kiln", p.epoch(1))).signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	first := p.place(2)
	p.waitPod(3)
	b := p.unit().Status.RuntimeBinding
	if !slices.Equal(b.UnsettledRebinds, []string{first}) || b.Expiry == nil || b.Expiry.Epoch != p.epoch(2) ||
		b.Expiry.Verdict != holdfastv1.VerdictStartupFailed || b.Expiry.LastAttempt != holdfastv1.RenewalUnreachable {
		t.Fatalf("after the first replacement: %+v expiry %+v", b, b.Expiry)
	}
	second := p.place(3)
	poll.Until(t, 60*time.Second, "the suspension", func() (bool, string) {
		u := p.unit()
		return meta.IsStatusConditionTrue(u.Status.Conditions, holdfastv1.ConditionFailoverSuspended), fmt.Sprintf("%+v", u.Status.RuntimeBinding)
	})
	u := p.unit()
	b = u.Status.RuntimeBinding
	if b.Epoch != p.epoch(3) || !slices.Equal(b.UnsettledRebinds, []string{first, second}) {
		t.Fatalf("suspended binding %+v", b)
	}
	if c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverSuspended); c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended %+v", c)
	}
	want := []string{units.EventLeaseEstablished, units.EventLeaseExpired, units.EventHold, units.EventRebound,
		units.EventLeaseExpired, units.EventRebound, units.EventLeaseExpired, units.EventBudgetExhausted}
	p.waitEvents(want)
	for _, l := range p.c.auditLines(t) {
		if l.Reason == units.EventLeaseExpired && l.Epoch > p.epoch(1) && !strings.HasPrefix(l.Verdict, "StartupFailed") {
			t.Fatalf("a replacement that never came up is recorded as a failed start-up: %+v", l)
		}
	}
	// Nothing more while suspended: the pod stays, no fourth binding.
	time.Sleep(3 * time.Second) // an absence of a fourth binding: only a window can show it
	if pod := runtimePod(t, p.u, p.epoch(3)); pod == nil || pod.DeletionTimestamp != nil {
		t.Fatal("suspension must leave the current pod in place")
	}
	if b := p.unit().Status.RuntimeBinding; b.Epoch != p.epoch(3) {
		t.Fatalf("a suspended unit was re-bound: %+v", b)
	}

	// The pod left in place finally starts: its first renewal recovers.
	p.k.setNode(second, func(s *simNode) { s.broken = false })
	p.waitLease(3, holdfastv1.LeaseHeld, plantStartupWait)
	poll.Until(t, 10*time.Second, "the suspension lifted", func() (bool, string) {
		u := p.unit()
		c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionFailoverSuspended)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == holdfastv1.ReasonRuntimeConfirmed && len(u.Status.RuntimeBinding.UnsettledRebinds) == 0,
			fmt.Sprintf("%+v", u.Status)
	})
	p.waitEvents(append(want, units.EventLeaseReestablished))
	p.waitWrites(3)
	if err := devicesim.CheckOneWriter(p.dev.Writes()); err != nil {
		t.Fatal(err)
	}
}

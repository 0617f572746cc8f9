package units

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestTheBudgetTriesEachFreeStandbyOnceThenSuspendsAndTheFirstRenewalLiftsIt(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver() // epoch 2, ledger empty so far
	for i, node := range []string{"standby-1", "standby-2"} {
		s.silentTurn(node, fmt.Sprintf("uid-s%d", i), "connection refused")
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventRebound, EventLeaseExpired, EventBudgetExhausted}) {
		t.Fatalf("records %v", got)
	}
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || !slices.Equal(b.UnsettledRebinds, []string{"standby-1", "standby-2"}) {
		t.Fatalf("suspended at epoch %d with ledger %v; want 3 and both standbys", b.Epoch, b.UnsettledRebinds)
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended %+v", c)
	}
	if s.pod == nil {
		t.Fatal("suspension never removes the current pod")
	}
	last := s.records[len(s.records)-1]
	if strings.HasPrefix(last.Reason, "Rebound") || strings.HasPrefix(last.Reason, "Failover") || strings.Contains(last.Reason, "Rebind") {
		t.Fatalf("the suspension's reason %q must not read as an ordinary failover", last.Reason)
	}

	// Nothing more while suspended, however long.
	for range 10 {
		s.advance(time.Minute)
		s.pass()
	}
	if len(s.records) != 4 {
		t.Fatalf("records while suspended: %v", s.reasons())
	}
	// The pod that was left in place finally answers.
	s.ack()
	s.pod.Status.Conditions[0].Status = corev1.ConditionTrue
	s.pass()
	s.advance(time.Second)
	s.ack()
	s.pass() // and it stays settled
	b = s.u.Status.RuntimeBinding
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonRuntimeConfirmed {
		t.Fatalf("the first acknowledged renewal lifts the suspension: %+v", c)
	}
	if len(b.UnsettledRebinds) != 0 || b.LeaseState != holdfastv1.LeaseHeld || b.Epoch != 3 {
		t.Fatalf("binding after recovery: %+v", b)
	}
}

func TestTheBudgetEdges(t *testing.T) {
	t.Run("a tried standby that went unfit leaves nothing free: no eligible target, not a suspension", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		s.silentRebind("standby-1", "uid-s1", "connection refused")
		s.free = nil // standby-1 is the node being left; standby-2 went NotReady
		s.advance(141 * time.Second)
		s.pass()
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventNoEligibleTarget}) {
			t.Fatalf("records %v", got)
		}
		if c := s.cond(holdfastv1.ConditionFailoverSuspended); c != nil {
			t.Fatalf("no suspension without a tried free target: %+v", c)
		}
		// standby-2 comes back: it is untried, so it is tried.
		s.free = []string{"standby-2"}
		s.pass()
		if s.u.Status.RuntimeBinding.Epoch != 3 {
			t.Fatalf("an untried standby that became fit is tried: epoch %d", s.u.Status.RuntimeBinding.Epoch)
		}
	})
	t.Run("the only free standby already tried: suspended", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		s.silentRebind("standby-1", "uid-s1", "connection refused")
		s.free = []string{"standby-1", "standby-2"}
		s.u.Status.RuntimeBinding.UnsettledRebinds = []string{"standby-1", "standby-2"}
		s.advance(141 * time.Second)
		s.pass()
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventBudgetExhausted}) {
			t.Fatalf("records %v", got)
		}
	})
	t.Run("a person's failover empties the ledger and lifts the suspension", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.failedOver()
		b := s.u.Status.RuntimeBinding
		b.UnsettledRebinds = []string{"standby-1", "standby-2"}
		meta.SetStatusCondition(&s.u.Status.Conditions, metav1.Condition{Type: holdfastv1.ConditionFailoverSuspended, Status: metav1.ConditionTrue, Reason: holdfastv1.ReasonAllTargetsTried})
		s.schedule("standby-2")
		s.u.Annotations = map[string]string{holdfastv1.AnnotationFailoverTo: "standby-1", holdfastv1.AnnotationRequestID: "req-42",
			holdfastv1.AnnotationFailoverConfirmFenced: "edge-1 powered off at the breaker", holdfastv1.AnnotationFailoverConfirmEpoch: "1"}
		s.certifyRunning()
		s.pass()
		nb := s.u.Status.RuntimeBinding
		if nb.Epoch != 3 || nb.Origin != holdfastv1.OriginManual || nb.RequestID != "req-42" || len(nb.UnsettledRebinds) != 0 {
			t.Fatalf("manual binding %+v", nb)
		}
		if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse {
			t.Fatalf("FailoverSuspended %+v", c)
		}
	})
}

// TestL5UnplacedRebindCountsAgainstTheBudget: a re-bind whose pod no
// scheduler places before its start-up grace runs out counts as one attempt
// (status.runtimeBinding.unplacedRebinds), so with no working scheduler the
// unit ends suspended after as many re-binds as it has free standbys, not
// in an epoch stream; the suspension says the pods could not be placed and
// why; the first acknowledged renewal settles it.
func TestL5UnplacedRebindCountsAgainstTheBudget(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver() // epoch 2, automatic, nothing placed yet
	s.unplacedTurn("0/3 nodes are available: 1 node(s) were the node being left, 2 node(s) had untolerated taint {plant/outage: }.")
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || len(b.UnplacedRebinds) != 1 || b.UnplacedRebinds[0].Epoch != 2 ||
		!strings.Contains(b.UnplacedRebinds[0].Message, "0/3 nodes are available") {
		t.Fatalf("after one unplaced re-bind: epoch %d, unplaced %+v", b.Epoch, b.UnplacedRebinds)
	}
	if r := s.records[len(s.records)-1]; r.Reason != EventRebound || !strings.Contains(r.Message, "1 attempt(s) left") {
		t.Fatalf("the re-bind says what is left of the budget: %s: %s", r.Reason, r.Message)
	}
	s.unplacedTurn("") // no scheduler at all
	for range 10 {
		s.advance(time.Minute)
		s.pass()
	}
	b = s.u.Status.RuntimeBinding
	if b.Epoch != 3 || len(b.UnsettledRebinds) != 0 || len(b.UnplacedRebinds) != 2 {
		t.Fatalf("suspended at epoch %d with ledger %v and unplaced %+v; want epoch 3 and two unplaced", b.Epoch, b.UnsettledRebinds, b.UnplacedRebinds)
	}
	if got := s.reasons(); !slices.Equal(got, []string{EventLeaseExpired, EventRebound, EventLeaseExpired, EventBudgetExhausted}) {
		t.Fatalf("records %v", got)
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonRebindsNotPlaced {
		t.Fatalf("FailoverSuspended %+v", c)
	}
	for _, want := range []string{"2 re-bind(s) were never placed on a node", "epoch 2: pod kiln-1-runtime-e2 stayed Pending, the scheduler could not place it: 0/3 nodes are available",
		"epoch 3: pod kiln-1-runtime-e3 stayed Pending and no scheduler reported on it: is holdfast-scheduler running?"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the suspension does not say %q: %s", want, c.Message)
		}
	}
	if e := b.Expiry; e == nil || e.Epoch != 3 || !strings.Contains(e.Message, "no scheduler reported on it") {
		t.Errorf("the expiry of a pod never placed says so: %+v", e)
	}

	// The scheduler comes back and places the pod left in place; its
	// runtime answers: the ledger is settled.
	s.schedule("standby-1")
	s.runtimePod("uid-late", true)
	s.loop()
	s.ack()
	s.pass()
	b = s.u.Status.RuntimeBinding
	if len(b.UnplacedRebinds) != 0 || len(b.UnsettledRebinds) != 0 || b.LeaseState != holdfastv1.LeaseHeld {
		t.Fatalf("the first renewal settles the whole ledger: %+v", b)
	}
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c.Status != metav1.ConditionFalse {
		t.Fatalf("FailoverSuspended %+v", c)
	}
}

func TestTheBudgetCountsAReBindPlacedLateByItsNodeNotTwice(t *testing.T) {
	s := newSim(t, failoverUnit())
	s.failedOver()
	s.unplacedTurn("")
	// Epoch 3 is placed on standby-1 and never answers: one unplaced and one
	// node tried is the budget of two free standbys.
	s.silentTurn("standby-1", "uid-s1", "connection refused")
	b := s.u.Status.RuntimeBinding
	if b.Epoch != 3 || !slices.Equal(b.UnsettledRebinds, []string{"standby-1"}) || len(b.UnplacedRebinds) != 1 {
		t.Fatalf("binding %+v", b)
	}
	if c := s.cond(holdfastv1.ConditionFailoverSuspended); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("FailoverSuspended %+v", c)
	}

	// An expired unplaced pod that the scheduler places before the margin
	// is counted by its node, once.
	s2 := newSim(t, failoverUnit())
	s2.failedOver()
	s2.pass()
	s2.pendingPod("")
	s2.advance(121 * time.Second)
	s2.pass()
	s2.pass()
	if n := len(s2.u.Status.RuntimeBinding.UnplacedRebinds); n != 1 {
		t.Fatalf("unplaced %d after the expiry, want 1", n)
	}
	s2.schedule("standby-2")
	s2.pass()
	b = s2.u.Status.RuntimeBinding
	if len(b.UnplacedRebinds) != 0 || !slices.Equal(b.UnsettledRebinds, []string{"standby-2"}) {
		t.Fatalf("placed late: unplaced %+v, ledger %v", b.UnplacedRebinds, b.UnsettledRebinds)
	}
}

// TestTheSuspensionNamesEveryStandbyTriedAndWhy: the message names each
// standby in the ledger (the current binding's with its verdict), and each
// eligible standby that is not free and why, not only the free ones.
func TestTheSuspensionNamesEveryStandbyTriedAndWhy(t *testing.T) {
	u := failoverUnit()
	u.Spec.Availability.Targets.Nodes = []string{"edge-b", "edge-c", "edge-d"}
	s := newSim(t, u)
	s.free = []string{"edge-b", "edge-c", "edge-d"}
	s.failedOver()
	for i, node := range []string{"edge-b", "edge-c"} {
		s.silentRebind(node, fmt.Sprintf("uid-%d", i), "dial tcp 10.0.0.7:9443: connect: connection refused")
		s.advance(121 * time.Second)
		s.pass()
		s.advance(20 * time.Second)
		s.free, s.unavailable = []string{"edge-c", "edge-d"}, map[string]string{"edge-b": "the node the current binding is on"}
		if i == 1 {
			// edge-c is where the unit now is; edge-d went NotReady.
			s.free, s.unavailable = []string{"edge-b"}, map[string]string{"edge-c": "the node the current binding is on", "edge-d": "NotReady"}
		}
		s.pass()
	}
	c := s.cond(holdfastv1.ConditionFailoverSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonAllTargetsTried {
		t.Fatalf("FailoverSuspended %+v (records %v)", c, s.reasons())
	}
	for _, want := range []string{
		"edge-b: tried since the runtime was last confirmed, did not take the lease",
		"edge-c: tried at epoch 3, the current binding: StartupFailed, last renewal attempt Unreachable: dial tcp 10.0.0.7:9443: connect: connection refused",
		"edge-d: NotReady",
		"Pod kiln-1-runtime-e3 stays at epoch 3",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the suspension does not say %q:\n%s", want, c.Message)
		}
	}
	if r := s.records[len(s.records)-1]; r.Reason != EventBudgetExhausted || r.Message != c.Message {
		t.Fatalf("the Event and audit line carry the same message: %s: %s", r.Reason, r.Message)
	}
}

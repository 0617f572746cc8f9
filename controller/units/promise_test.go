package units

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// granting is the lease the reconciler's loop would send now
// (LeaseTargetFor), zero when it would send none.
func (s *sim) granting() time.Duration {
	t, ok := LeaseTargetFor(s.u, s.pod)
	if !ok {
		return 0
	}
	return t.Duration
}

// retarget is the reconciler's ensureLoop: the loop takes the lease
// LeaseTargetFor gives.
func (s *sim) retarget() {
	s.t.Helper()
	d := s.granting()
	if d == 0 {
		s.t.Fatal("no renewal target")
	}
	s.obs.Target.Duration = d
}

func (s *sim) promise() *holdfastv1.RuntimePromise { return s.u.Status.RuntimeBinding.Promise }

// shortened is a unit held under a 60s lease (hold bound 30s, margin
// 35s) at t0, whose lease the Unit then shortens to 10s; the loop takes the
// shorter lease as the reconciler's ensureLoop gives it.
func shortened(t *testing.T) *sim {
	u := failoverUnit()
	u.Spec.Availability.LeaseDurationSeconds = 60
	s := newSim(t, u)
	s.held()
	s.retarget()
	s.u.Spec.Availability.LeaseDurationSeconds = 10
	s.retarget()
	return s
}

// recordAt passes at every second from now up to and including at, and
// fails when a record comes before at or want is not the one at it.
func (s *sim) recordAt(at time.Time, want string) {
	s.t.Helper()
	n := len(s.records)
	for s.now.Before(at) {
		s.advance(time.Second)
		s.pass()
		if len(s.records) > n && s.now.Before(at) {
			s.t.Fatalf("%s at %v, %v before it was due: records %v", s.records[n].Reason, s.now.Sub(t0), at.Sub(s.now), s.reasons())
		}
	}
	if len(s.records) != n+1 || s.records[n].Reason != want {
		s.t.Fatalf("at %v: records %v, want %s last", s.now.Sub(t0), s.reasons(), want)
	}
}

// L11: no field of a live Unit makes the controller decide on a weaker
// promise than its runtime may hold. Each subtest edits one field of a
// held unit (lease 30s, hold bound 15s, margin 20s, runtime on edge-1 at
// epoch 1) and follows the decisions on an injected clock.
func TestALiveSpecChangeNeverWeakensAHeldPromise(t *testing.T) {
	t.Run("leaseDurationSeconds lengthened is recorded before it is granted and judged at once", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.u.Spec.Availability.LeaseDurationSeconds = 60
		if d := s.granting(); d != 30*time.Second {
			t.Fatalf("before the record is written the grantor sends %v, want the recorded 30s", d)
		}
		s.pass()
		if p := s.promise(); p.LeaseDurationSeconds != 60 || p.HoldBoundMillis != 30000 || p.RebindMargin() != 35*time.Second {
			t.Fatalf("promise %+v, want lease 60s, hold bound 30s, margin 35s", p)
		}
		if d := s.granting(); d != 60*time.Second {
			t.Fatalf("after the record the grantor sends %v, want 60s", d)
		}
		s.retarget()
		s.ack()
		s.fail(grantor.Unreachable, "i/o timeout")
		s.recordAt(t0.Add(60*time.Second), EventLeaseExpired)
		if at := s.u.Status.RuntimeBinding.Expiry.At.Time; !at.Equal(t0.Add(60 * time.Second)) {
			t.Fatalf("expired at %v, want lastAck + 60s", at.Sub(t0))
		}
	})

	t.Run("leaseDurationSeconds shortened on a Held unit keeps the longer lease until no grant of it can be in force", func(t *testing.T) {
		s := shortened(t)
		if d := s.granting(); d != 10*time.Second {
			t.Fatalf("grants carry the shorter lease from the first pass that sees it, got %v", d)
		}
		s.pass()
		p := s.promise()
		if p.LeaseDurationSeconds != 60 || p.ShorterLease == nil || p.ShorterLease.LeaseDurationSeconds != 10 ||
			!p.ShorterLease.Since.Time.Equal(t0) || !p.ShorterLease.EffectiveAt.Time.Equal(t0.Add(90*time.Second)) {
			t.Fatalf("promise %+v %+v, want 60s recorded and 10s in effect at since + 60s + 30s", p, p.ShorterLease)
		}
		// The node is cut at once: the runtime may hold the 60s it was
		// granted at t0 and hold for 30s after it.
		s.fail(grantor.Unreachable, "i/o timeout")
		s.recordAt(t0.Add(60*time.Second), EventLeaseExpired)
		if at := s.u.Status.RuntimeBinding.Expiry.At.Time; !at.Equal(t0.Add(60 * time.Second)) {
			t.Fatalf("expired at %v, want lastAck + the recorded 60s", at.Sub(t0))
		}
		if m := s.records[0].Message; !strings.Contains(m, "for up to 30s") {
			t.Fatalf("the expiry names the recorded hold bound: %q", m)
		}
		s.recordAt(t0.Add(90*time.Second), EventHold)
		s.recordAt(t0.Add(95*time.Second), EventRebound)
		if p := s.promise(); p.LeaseDurationSeconds != 10 || p.ShorterLease != nil {
			t.Fatalf("the new binding is made under the Unit's lease: %+v", p)
		}
	})

	t.Run("leaseDurationSeconds shortened takes effect once the longer grants are over", func(t *testing.T) {
		s := shortened(t)
		s.pass()
		for s.now.Before(t0.Add(89 * time.Second)) {
			s.advance(time.Second)
			s.ack()
			s.pass()
			if p := s.promise(); p.LeaseDurationSeconds != 60 {
				t.Fatalf("at %v the record fell to %ds: a runtime granted 60s at t0 may write until 90s", s.now.Sub(t0), p.LeaseDurationSeconds)
			}
		}
		s.advance(time.Second)
		s.ack()
		s.pass()
		if p := s.promise(); p.LeaseDurationSeconds != 10 || p.HoldBoundMillis != 5000 || p.ShorterLease != nil || p.RebindMargin() != 35*time.Second {
			t.Fatalf("at 90s the shorter lease takes effect, the margin stays for the epoch: %+v", p)
		}
		s.fail(grantor.Unreachable, "i/o timeout")
		s.recordAt(t0.Add(100*time.Second), EventLeaseExpired)
		if len(s.records) != 1 {
			t.Fatalf("records %v", s.reasons())
		}
	})

	t.Run("leaseDurationSeconds shortened survives a controller restart", func(t *testing.T) {
		s := shortened(t)
		s.pass()
		// A new leader at 20s: it has seen no renewal, reads the record,
		// and holds off (90s stand-down + 60s + 35s).
		s.advance(20 * time.Second)
		s.obs = nil
		s.holdOff = s.now.Add(185 * time.Second)
		s.pass()
		p := s.promise()
		if p.LeaseDurationSeconds != 60 || p.ShorterLease == nil || !p.ShorterLease.Since.Time.Equal(t0) ||
			!p.ShorterLease.EffectiveAt.Time.Equal(s.holdOff) {
			t.Fatalf("the new leader keeps the record and waits out its hold-off: %+v %+v", p, p.ShorterLease)
		}
		s.loop()
		s.retarget()
		if s.obs.Target.Duration != 10*time.Second {
			t.Fatalf("the new leader grants %v, want the Unit's 10s", s.obs.Target.Duration)
		}
		s.ack() // at 20s
		s.fail(grantor.Unreachable, "i/o timeout")
		s.recordAt(t0.Add(80*time.Second), EventLeaseExpired)
		if at := s.u.Status.RuntimeBinding.Expiry.At.Time; !at.Equal(t0.Add(80 * time.Second)) {
			t.Fatalf("expired at %v, want lastAck + the recorded 60s", at.Sub(t0))
		}
	})

	t.Run("rebindMarginSeconds lengthened applies at once, shortened at the next binding", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.u.Spec.Availability.RebindMarginSeconds = ptr.To(int32(60))
		s.pass()
		s.u.Spec.Availability.RebindMarginSeconds = ptr.To(int32(15))
		s.pass()
		if m := s.promise().RebindMargin(); m != 60*time.Second {
			t.Fatalf("recorded margin %v, want the longest asked for at this epoch, 60s", m)
		}
		s.fail(grantor.Unreachable, "i/o timeout")
		s.recordAt(t0.Add(30*time.Second), EventLeaseExpired)
		s.recordAt(t0.Add(45*time.Second), EventHold)
		s.recordAt(t0.Add(90*time.Second), EventRebound)
		if m := s.promise().RebindMargin(); m != 15*time.Second {
			t.Fatalf("the next binding takes the Unit's margin: %v", m)
		}
	})

	t.Run("runtimeStartupGraceSeconds shortened applies at once, never below the recorded lease", func(t *testing.T) {
		u := failoverUnit()
		u.Spec.Availability.LeaseDurationSeconds = 60
		s := newSim(t, u)
		s.starting()
		s.pass() // first address at t0
		s.u.Spec.Availability.LeaseDurationSeconds, s.u.Spec.Availability.RuntimeStartupGraceSeconds = 10, 10
		s.recordAt(t0.Add(60*time.Second), EventLeaseExpired)
		if e := s.u.Status.RuntimeBinding.Expiry; e.Verdict != holdfastv1.VerdictStartupFailed {
			t.Fatalf("verdict %+v", e)
		}
	})

	t.Run("mode Failover to Autonomy is a hand-over: held, the runtime fences by its own lease, then epoch 2 on the same node", func(t *testing.T) {
		s := newSim(t, failoverUnit())
		s.held()
		s.advance(3 * time.Second)
		s.ack()
		s.pass()
		s.u.Spec.Availability.Mode = holdfastv1.Autonomy
		p := s.pass()
		b := s.u.Status.RuntimeBinding
		if !p.StopGranting || p.DeletePod || b.HandOver == nil || !b.HandOver.Since.Time.Equal(s.now) || b.Epoch != 1 {
			t.Fatalf("plan stop %v delete %v, binding %+v", p.StopGranting, p.DeletePod, b)
		}
		if got := s.reasons(); !slices.Equal(got, []string{EventHandOver}) || s.records[0].Type != corev1.EventTypeWarning ||
			!strings.Contains(s.records[0].Message, "spec.availability.mode is Autonomy and the runtime runs in Failover") {
			t.Fatalf("the stop is announced: %v %+v", got, s.records)
		}
		if c := s.cond(holdfastv1.ConditionHeld); c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonHandOver {
			t.Fatalf("Held %+v", c)
		}
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c.Status != metav1.ConditionTrue || c.Reason != holdfastv1.ReasonAwaitingFence {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
		if d := s.granting(); d != 0 {
			t.Fatalf("a binding handed over is granted nothing, got %v", d)
		}
		// The paused loop keeps its last acknowledgement (3s): the runtime
		// holds until 33s, fences by 48s; epoch 2 starts after the margin.
		for s.now.Before(t0.Add(33 * time.Second)) {
			s.advance(time.Second)
			s.pass()
		}
		// The lease's own expiry is recorded, without an alarm.
		if b := s.u.Status.RuntimeBinding; b.LeaseState != holdfastv1.LeaseExpired || b.Expiry == nil ||
			!strings.HasPrefix(b.Expiry.Message, "planned hand-over") || len(s.records) != 1 {
			t.Fatalf("the old binding's expiry: %+v, records %v", b, s.reasons())
		}
		s.recordAt(t0.Add(53*time.Second), EventHandedOver)
		nb := s.u.Status.RuntimeBinding
		if nb.Epoch != 2 || nb.Node != "edge-1" || nb.Origin != holdfastv1.OriginHandOver || nb.PreviousNode != "" ||
			nb.Promise.Mode != holdfastv1.Autonomy || nb.HandOver != nil {
			t.Fatalf("new binding %+v promise %+v", nb, nb.Promise)
		}
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c.Status != metav1.ConditionFalse || c.Reason != holdfastv1.ReasonHandedOver {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
		if env := podEnvOf(RuntimePod(s.u, 2, placementFor(s.u, nb))); env[holdfastv1.RuntimeEnvMode] != "Autonomy" {
			t.Fatalf("the new runtime runs in the recorded mode: %v", env)
		}
		// Held until a person restarts it, once the new runtime is ready.
		s.u.Annotations = map[string]string{holdfastv1.AnnotationRestart: s.now.Add(time.Second).Format(time.RFC3339)}
		s.runtimePod("uid-2", true)
		s.advance(2 * time.Second)
		s.pass()
		if got := s.reasons(); !slices.Equal(got, []string{EventHandOver, EventHandedOver, EventRestarted}) {
			t.Fatalf("records %v", got)
		}
	})

	t.Run("mode Autonomy to Failover is a hand-over: the Autonomy runtime is granted nothing and stopped, epoch 2 starts once its pod is gone", func(t *testing.T) {
		s := newSim(t, autonomyUnit())
		s.placed(true)
		s.pass()
		s.u.Spec.Availability.Mode = holdfastv1.Failover
		if d := s.granting(); d != 0 {
			t.Fatalf("an Autonomy runtime is never granted a lease, got %v", d)
		}
		p := s.pass()
		if p.StopGranting || !p.DeletePod || s.u.Status.RuntimeBinding.HandOver == nil {
			t.Fatalf("plan stop %v delete %v", p.StopGranting, p.DeletePod)
		}
		if got := s.reasons(); !slices.Equal(got, []string{EventHandOver}) {
			t.Fatalf("records %v", got)
		}
		// Its pod stays (a cut node's kubelet never confirms): nothing
		// starts, however long.
		for range 10 {
			s.advance(time.Minute)
			if p := s.pass(); !p.DeletePod || p.Rebind != nil {
				t.Fatalf("plan %+v while the Autonomy runtime's pod exists", p)
			}
		}
		if c := s.cond(holdfastv1.ConditionRuntimeHandOver); c.Reason != holdfastv1.ReasonAwaitingPodGone {
			t.Fatalf("RuntimeHandOver %+v", c)
		}
		s.goneAndListed()
		s.pass()
		nb := s.u.Status.RuntimeBinding
		if got := s.reasons(); !slices.Equal(got, []string{EventHandOver, EventHandedOver}) ||
			nb.Epoch != 2 || nb.Node != "edge-1" || nb.Promise.Mode != holdfastv1.Failover || nb.LeaseState != holdfastv1.LeasePending {
			t.Fatalf("records %v binding %+v", got, nb)
		}
	})

	for _, tc := range []struct {
		field string
		edit  func(*holdfastv1.Unit)
	}{
		{"spec.runtime.image", func(u *holdfastv1.Unit) { u.Spec.Runtime.Image = "unit-runtime:v2" }},
		{"spec.runtime.args", func(u *holdfastv1.Unit) { u.Spec.Runtime.Args = []string{"--scan-interval=100ms"} }},
		{"spec.runtime.env", func(u *holdfastv1.Unit) { u.Spec.Runtime.Env = []corev1.EnvVar{{Name: "PLANT", Value: "south"}} }},
		{"spec.runtime.leasePort", func(u *holdfastv1.Unit) { u.Spec.Runtime.LeasePort = 9543 }},
	} {
		t.Run(tc.field+" is a hand-over to a new process", func(t *testing.T) {
			s := newSim(t, failoverUnit())
			s.held()
			tc.edit(s.u)
			p := s.pass()
			if !p.StopGranting || s.u.Status.RuntimeBinding.HandOver == nil ||
				!strings.Contains(s.u.Status.RuntimeBinding.HandOver.Reason, "spec.runtime") {
				t.Fatalf("plan stop %v, binding %+v", p.StopGranting, s.u.Status.RuntimeBinding)
			}
			// The grants stop at t0: the runtime fences by 45s, epoch 2
			// starts at 50s (lease 30s + margin 20s), not before.
			s.recordAt(t0.Add(50*time.Second), EventHandedOver)
			if nb := s.u.Status.RuntimeBinding; nb.Epoch != 2 || nb.Node != "edge-1" || nb.Promise.RuntimeDigest == "" {
				t.Fatalf("binding %+v", nb)
			}
		})
	}

	for _, tc := range []struct {
		field string
		edit  func(*holdfastv1.Unit)
	}{
		{"targets", func(u *holdfastv1.Unit) {
			u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{Nodes: []string{"standby-9"}}
		}},
		{"nodeSelector", func(u *holdfastv1.Unit) { u.Spec.NodeSelector = map[string]string{"holdfast.io/device": "kiln-2"} }},
		{"colocation", func(u *holdfastv1.Unit) { u.Spec.Availability.Colocation = holdfastv1.ColocationRefuse }},
		{"spec.runtime.resources", func(u *holdfastv1.Unit) {
			u.Spec.Runtime.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
		}},
	} {
		t.Run(tc.field+" leaves the running runtime and its promise alone", func(t *testing.T) {
			s := newSim(t, failoverUnit())
			s.held()
			before := s.u.Status.RuntimeBinding.DeepCopy()
			tc.edit(s.u)
			for range 12 {
				s.advance(5 * time.Second)
				s.ack()
				s.pass()
			}
			if len(s.records) != 0 || s.cond(holdfastv1.ConditionHeld) != nil {
				t.Fatalf("records %v", s.reasons())
			}
			after := s.u.Status.RuntimeBinding
			if after.Epoch != 1 || after.Node != "edge-1" || after.HandOver != nil || *after.Promise != *before.Promise {
				t.Fatalf("binding %+v promise %+v, was %+v", after, after.Promise, before.Promise)
			}
		})
	}
}

func podEnvOf(p *corev1.Pod) map[string]string {
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

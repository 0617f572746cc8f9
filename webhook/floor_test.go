package webhook

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/policy"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// TestTheLeaseFloorFollowsTheGrantorTimings (docs/design.md §3 L14): the webhook is
// given the installed grantor's timings by the same flags as
// holdfast-controller; the floor is the least whole-second lease whose
// budget after a renewal holds the grantor's hand-over and the spare; it
// moves with every term of the hand-over; admission refuses a Failover
// unit one millisecond below it (the second below: the API keeps seconds)
// with the arithmetic, and accepts the floor.
func TestTheLeaseFloorFollowsTheGrantorTimings(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag string
		want time.Duration
	}{
		{"shipped", "", 30 * time.Second},
		// hand-over 16.9s + 5s = 21.9s <= lease x 2/3: 32.85s
		{"election lease", "--leader-election-lease-duration=8s", 33 * time.Second},
		// not a term of the hand-over
		{"renew deadline", "--leader-election-renew-deadline=5s", 30 * time.Second},
		// two polls of 2 x 2.2s
		{"retry period", "--leader-election-retry-period=2s", 37 * time.Second},
		{"read-idle timeout", "--apiserver-read-idle-timeout=5s", 35 * time.Second},
		{"ping timeout", "--apiserver-ping-timeout=1s", 29 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			fs := flag.NewFlagSet("holdfast-webhook", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			var args []string
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			g := o.Grantor
			floor, ok := g.LeaseFloor()
			if !ok || floor != tc.want {
				t.Fatalf("floor = %v (%v), want %v (hand-over %v)", floor, ok, tc.want, g.Gap())
			}
			if g.Spare(floor) < policy.RequiredSpare || g.Spare(floor-time.Second) >= policy.RequiredSpare {
				t.Fatalf("%v is not the least lease that keeps %v of spare: %v at it, %v a second below", floor, policy.RequiredSpare,
					g.Spare(floor), g.Spare(floor-time.Second))
			}

			u := unitBound(holdfastv1.Failover, "")
			u.Status = holdfastv1.UnitStatus{}
			u.Spec.Availability.LeaseDurationSeconds = int32(floor / time.Second)
			v, _ := checkUnit(o, admin, nil, u, unitFacts{})
			expect(t, v)

			below := floor - time.Millisecond
			u.Spec.Availability.LeaseDurationSeconds = int32(below / time.Second)
			v, _ = checkUnit(o, admin, nil, u, unitFacts{})
			if v.allowed() {
				t.Fatalf("a %v lease is admitted below the floor %v", u.Spec.Availability.LeaseDuration(), floor)
			}
			msg := fmt.Sprint(v.invalid)
			for _, w := range []string{
				fmt.Sprintf("spec.availability.leaseDurationSeconds: Invalid value: %d: must be at least %d, the lease floor of the installed grantor",
					floor/time.Second-1, floor/time.Second),
				"lease - 2 x lease/6 = " + policy.BudgetAfterARenewal(u.Spec.Availability.LeaseDuration()).Round(time.Millisecond).String(),
				"hand-over takes up to " + g.Gap().String(),
				fmt.Sprintf("dead-peer detection %v + %v, poll %v, election lease %v, poll %v, warm start %v", g.ReadIdleTimeout, g.PingTimeout,
					g.Poll(), g.ElectionLeaseDuration, g.Poll(), g.WarmStart),
				"plus 5s to spare = " + (g.Gap() + policy.RequiredSpare).String(),
				fmt.Sprintf("at %ds it has %v", floor/time.Second, policy.BudgetAfterARenewal(floor).Round(time.Millisecond)),
			} {
				if !strings.Contains(msg, w) {
					t.Errorf("the refusal does not say %q:\n%s", w, msg)
				}
			}

			// An Autonomy unit holds no lease; switching one to Failover
			// is judged against the floor.
			u.Spec.Availability.Mode = holdfastv1.Autonomy
			v, _ = checkUnit(o, admin, nil, u, unitFacts{})
			expect(t, v)
		})
	}
}

// Existing units below a raised floor (L14): an edit that leaves the lease
// below the floor is refused, an edit that raises it to the floor is
// taken, and requests and status writes are not judged by the floor.
func TestAnEditOfAUnitBelowTheFloorMustRaiseTheLease(t *testing.T) {
	o := testOptions()
	below := unitBound(holdfastv1.Failover, holdfastv1.LeaseHeld)
	below.Spec.Availability.LeaseDurationSeconds = 20
	targets := below.DeepCopy()
	targets.Spec.Availability.Targets.Nodes = []string{"edge-2"}
	v, _ := checkUnit(o, admin, below, targets, unitFacts{})
	if v.allowed() || !strings.Contains(fmt.Sprint(v.invalid), "leaseDurationSeconds: Invalid value: 20: must be at least 30") {
		t.Fatalf("an edit leaving the lease below the floor: %+v", v)
	}
	fixed := targets.DeepCopy()
	fixed.Spec.Availability.LeaseDurationSeconds = 30
	v, _ = checkUnit(o, admin, below, fixed, unitFacts{})
	expect(t, v)
	restart := below.DeepCopy()
	restart.Annotations = map[string]string{holdfastv1.AnnotationRestart: "2026-11-29T20:15:00Z"}
	v, _ = checkUnit(o, admin, below, restart, unitFacts{})
	expect(t, v)
	status := below.DeepCopy()
	status.Status.RuntimeBinding.Node = "edge-2"
	v, _ = checkUnit(o, controller, below, status, unitFacts{})
	expect(t, v)
}

package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// NextPromise, field by field, against a Failover promise of 60s (hold
// bound 30s, margin 35s) recorded at t0.
func TestNextPromiseNeverWeakensTheRecord(t *testing.T) {
	t0 := time.Date(2026, 9, 22, 10, 0, 0, 0, time.UTC)
	unit := func(lease int32, margin *int32) *holdfastv1.Unit {
		return &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{
			Mode: holdfastv1.Failover, LeaseDurationSeconds: lease, RebindMarginSeconds: margin}}}
	}
	recorded := NewPromise(unit(60, nil))
	if recorded.LeaseDurationSeconds != 60 || recorded.HoldBoundMillis != 30000 || recorded.RebindMarginMillis != 35000 || recorded.Mode != holdfastv1.Failover {
		t.Fatalf("fixture %+v", recorded)
	}
	shorter := func(since, effective time.Time) *holdfastv1.ShorterLease {
		return &holdfastv1.ShorterLease{LeaseDurationSeconds: 10, Since: metav1.NewTime(since), EffectiveAt: metav1.NewTime(effective)}
	}
	with := func(f func(*holdfastv1.RuntimePromise)) holdfastv1.RuntimePromise {
		p := *recorded.DeepCopy()
		f(&p)
		return p
	}
	for _, tc := range []struct {
		name     string
		from     holdfastv1.RuntimePromise
		u        *holdfastv1.Unit
		in       PromiseInputs
		want     holdfastv1.RuntimePromise
		wantWake time.Time
	}{
		{name: "unchanged", from: recorded, u: unit(60, nil), in: PromiseInputs{Now: t0}, want: recorded},
		{name: "a longer lease is recorded at once, with its hold bound and margin", from: recorded, u: unit(120, nil), in: PromiseInputs{Now: t0},
			want: with(func(p *holdfastv1.RuntimePromise) {
				p.LeaseDurationSeconds, p.HoldBoundMillis, p.RebindMarginMillis = 120, 30000, 35000
			})},
		{name: "a longer margin is recorded at once", from: recorded, u: unit(60, ptr.To(int32(90))), in: PromiseInputs{Now: t0},
			want: with(func(p *holdfastv1.RuntimePromise) { p.RebindMarginMillis = 90000 })},
		{name: "a shorter margin waits for the next binding", from: recorded, u: unit(60, ptr.To(int32(30))), in: PromiseInputs{Now: t0}, want: recorded},
		{name: "a shorter lease waits for the grantor to send it", from: recorded, u: unit(10, nil), in: PromiseInputs{Now: t0, Granting: 60 * time.Second},
			want: recorded, wantWake: t0.Add(time.Second)},
		{name: "a shorter lease starts its clock once the grantor sends it", from: recorded, u: unit(10, nil), in: PromiseInputs{Now: t0.Add(300 * time.Millisecond), Granting: 10 * time.Second},
			want: with(func(p *holdfastv1.RuntimePromise) {
				p.ShorterLease = shorter(t0.Add(time.Second), t0.Add(91*time.Second))
			}),
			wantWake: t0.Add(91 * time.Second)},
		{name: "a new leader's hold-off puts it later", from: with(func(p *holdfastv1.RuntimePromise) { p.ShorterLease = shorter(t0, t0.Add(90*time.Second)) }),
			u: unit(10, nil), in: PromiseInputs{Now: t0.Add(40 * time.Second), HoldOffUntil: t0.Add(200 * time.Second)},
			want:     with(func(p *holdfastv1.RuntimePromise) { p.ShorterLease = shorter(t0, t0.Add(200*time.Second)) }),
			wantWake: t0.Add(200 * time.Second)},
		{name: "another shorter lease starts the clock again", from: with(func(p *holdfastv1.RuntimePromise) { p.ShorterLease = shorter(t0, t0.Add(90*time.Second)) }),
			u: unit(20, nil), in: PromiseInputs{Now: t0.Add(40 * time.Second), Granting: 20 * time.Second},
			want: with(func(p *holdfastv1.RuntimePromise) {
				p.ShorterLease = &holdfastv1.ShorterLease{LeaseDurationSeconds: 20, Since: metav1.NewTime(t0.Add(40 * time.Second)), EffectiveAt: metav1.NewTime(t0.Add(130 * time.Second))}
			}),
			wantWake: t0.Add(130 * time.Second)},
		{name: "the shorter lease takes effect at its instant, the margin stays", from: with(func(p *holdfastv1.RuntimePromise) { p.ShorterLease = shorter(t0, t0.Add(90*time.Second)) }),
			u: unit(10, nil), in: PromiseInputs{Now: t0.Add(90 * time.Second)},
			want: with(func(p *holdfastv1.RuntimePromise) { p.LeaseDurationSeconds, p.HoldBoundMillis = 10, 5000 })},
		{name: "asked back to the recorded lease, nothing is pending", from: with(func(p *holdfastv1.RuntimePromise) { p.ShorterLease = shorter(t0, t0.Add(90*time.Second)) }),
			u: unit(60, nil), in: PromiseInputs{Now: t0.Add(10 * time.Second)}, want: recorded},
		{name: "an Autonomy runtime is granted nothing: its promise follows the Unit", from: with(func(p *holdfastv1.RuntimePromise) { p.Mode = holdfastv1.Autonomy }),
			u: unit(10, nil), in: PromiseInputs{Now: t0},
			want: with(func(p *holdfastv1.RuntimePromise) {
				p.Mode, p.LeaseDurationSeconds, p.HoldBoundMillis, p.RebindMarginMillis = holdfastv1.Autonomy, 10, 5000, 10000
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, wake := NextPromise(tc.from, tc.u, tc.in)
			got.RuntimeDigest, tc.want.RuntimeDigest = "", ""
			if !equalPromise(got, tc.want) || !wake.Equal(tc.wantWake) {
				t.Fatalf("got %+v %+v wake %v\nwant %+v %+v wake %v", got, got.ShorterLease, wake, tc.want, tc.want.ShorterLease, tc.wantWake)
			}
		})
	}
}

func equalPromise(a, b holdfastv1.RuntimePromise) bool {
	as, bs := a.ShorterLease, b.ShorterLease
	a.ShorterLease, b.ShorterLease = nil, nil
	if a != b || (as == nil) != (bs == nil) {
		return false
	}
	return as == nil || (as.LeaseDurationSeconds == bs.LeaseDurationSeconds && as.Since.Equal(&bs.Since) && as.EffectiveAt.Equal(&bs.EffectiveAt))
}

// A change of mode or of what defines the process in spec.runtime needs
// another runtime process; resources and the pull policy do not.
func TestHandOverReasons(t *testing.T) {
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{
		Runtime:      holdfastv1.UnitRuntime{Image: "rt:1", Args: []string{"-a"}, HealthPort: 9440, LeasePort: 9443, MetricsPort: 9441},
		Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30}}}
	p := NewPromise(u)
	for _, tc := range []struct {
		name string
		edit func(*holdfastv1.Unit)
		want string
	}{
		{"nothing", func(*holdfastv1.Unit) {}, ""},
		{"mode", func(u *holdfastv1.Unit) { u.Spec.Availability.Mode = holdfastv1.Autonomy }, "spec.availability.mode is Autonomy and the runtime runs in Failover"},
		{"image", func(u *holdfastv1.Unit) { u.Spec.Runtime.Image = "rt:2" }, "spec.runtime"},
		{"args", func(u *holdfastv1.Unit) { u.Spec.Runtime.Args = nil }, "spec.runtime"},
		{"health port", func(u *holdfastv1.Unit) { u.Spec.Runtime.HealthPort = 9450 }, "spec.runtime"},
		{"pull policy", func(u *holdfastv1.Unit) { u.Spec.Runtime.ImagePullPolicy = "Always" }, ""},
		{"lease", func(u *holdfastv1.Unit) { u.Spec.Availability.LeaseDurationSeconds = 90 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := u.DeepCopy()
			tc.edit(v)
			got := strings.Join(HandOverReasons(v, &p), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("reasons %q, want %q", got, tc.want)
			}
		})
	}
}

package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// NewPromise is the promise a new binding is made under: the Unit's mode,
// lease, margin and spec.runtime as they are now (docs/design.md §3 L11).
func NewPromise(u *holdfastv1.Unit) holdfastv1.RuntimePromise {
	a := &u.Spec.Availability
	mode := a.Mode
	if mode == "" {
		mode = holdfastv1.Autonomy
	}
	p := holdfastv1.RuntimePromise{Mode: mode, RuntimeDigest: RuntimeDigest(&u.Spec.Runtime)}
	setLease(&p, a.LeaseDuration())
	p.RebindMarginMillis = a.RebindMargin().Milliseconds()
	return p
}

func setLease(p *holdfastv1.RuntimePromise, d time.Duration) {
	p.LeaseDurationSeconds = seconds(d)
	p.HoldBoundMillis = p.HoldBound().Milliseconds()
}

// seconds rounds up: a longer lease is only ever safer.
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// RuntimeDigest names what defines a unit's writing process in its
// spec.runtime: the image, the arguments, the environment and the ports.
// Resources and the pull policy are not in it: they apply to the next pod
// without another process being needed now.
func RuntimeDigest(rt *holdfastv1.UnitRuntime) string {
	b, _ := json.Marshal(struct {
		Image       string          `json:"image"`
		Args        []string        `json:"args"`
		Env         []corev1.EnvVar `json:"env"`
		HealthPort  int32           `json:"healthPort"`
		LeasePort   int32           `json:"leasePort"`
		MetricsPort int32           `json:"metricsPort"`
	}{rt.Image, rt.Args, rt.Env, rt.HealthPort, rt.LeasePort, rt.MetricsPort})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:12])
}

// HandOverReasons names what the Unit asks for that the runtime held to p
// cannot become: another mode or another spec.runtime each need another
// runtime process (the pod's environment and container fix both). Empty
// when the runtime can go on.
func HandOverReasons(u *holdfastv1.Unit, p *holdfastv1.RuntimePromise) []string {
	var why []string
	mode := u.Spec.Availability.Mode
	if mode == "" {
		mode = holdfastv1.Autonomy
	}
	if mode != p.Mode {
		why = append(why, fmt.Sprintf("spec.availability.mode is %s and the runtime runs in %s", mode, p.Mode))
	}
	if p.RuntimeDigest != "" && RuntimeDigest(&u.Spec.Runtime) != p.RuntimeDigest {
		why = append(why, "spec.runtime (image, args, env or ports) differs from the one the runtime was started with")
	}
	return why
}

// PromiseInputs is what NextPromise decides from besides the Unit.
type PromiseInputs struct {
	Now time.Time
	// HoldOffUntil is the current leader's hold-off under the recorded
	// terms (L6): until then a predecessor may still grant what it held.
	// Zero when there is none.
	HoldOffUntil time.Time
	// Granting is the lease this process's renewal loop at the binding
	// sends now; zero when it runs none.
	Granting time.Duration
}

// NextPromise brings a Failover binding's promise toward the Unit's
// availability without ever weakening it (L11):
//   - a longer lease or margin is recorded at once, and the grantor sends
//     the longer lease only once the record is written (write-ahead: the
//     grantor's target is never above the recorded lease);
//   - a shorter lease is sent at once but recorded as shorterLease, and
//     takes effect only once no grant under the recorded lease can be in
//     force: every such grant went out before shorterLease.since, so a
//     runtime granted it writes no later than WritesEndBy(since); and a
//     predecessor grantor stands down within the hold-off;
//   - a shorter margin waits for the next binding.
//
// An Autonomy runtime is granted nothing, so its promise follows the Unit at
// once. wake is when the promise changes next without an edit (zero if
// never).
func NextPromise(p holdfastv1.RuntimePromise, u *holdfastv1.Unit, in PromiseInputs) (next holdfastv1.RuntimePromise, wake time.Time) {
	a := &u.Spec.Availability
	next = *p.DeepCopy()
	want := a.LeaseDuration()
	if want < holdfastv1.MinLeaseDuration {
		return next, time.Time{} // malformed: admission refuses it, nothing is changed on it
	}
	if p.Mode != holdfastv1.Failover {
		setLease(&next, want)
		next.RebindMarginMillis = a.RebindMargin().Milliseconds()
		next.ShorterLease = nil
		return next, time.Time{}
	}
	if m := a.RebindMargin().Milliseconds(); m > next.RebindMarginMillis {
		next.RebindMarginMillis = m
	}
	held := p.LeaseDuration()
	switch {
	case want > held:
		setLease(&next, want)
		next.RebindMarginMillis = max(next.RebindMarginMillis, next.HoldBoundMillis)
		next.ShorterLease = nil
	case want == held:
		next.ShorterLease = nil
	default:
		s := next.ShorterLease
		if s == nil || s.LeaseDurationSeconds != seconds(want) {
			if in.Granting > want {
				// The loop has not taken the shorter lease yet: its next
				// pass retargets it, and the clock starts after that.
				return next, in.Now.Add(time.Second)
			}
			s = &holdfastv1.ShorterLease{LeaseDurationSeconds: seconds(want), Since: metav1.NewTime(CeilSecond(in.Now))}
		}
		at := p.WritesEndBy(s.Since.Time)
		if in.HoldOffUntil.After(at) {
			at = in.HoldOffUntil
		}
		s.EffectiveAt = metav1.NewTime(CeilSecond(at))
		next.ShorterLease = s
		if in.Now.Before(s.EffectiveAt.Time) {
			return next, s.EffectiveAt.Time
		}
		setLease(&next, want)
		next.ShorterLease = nil
	}
	return next, time.Time{}
}

// CeilSecond rounds t up to the second the API keeps: a recorded instant
// that bounds what a runtime may still do is never rounded earlier.
func CeilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
)

// Phases are a failover's instants as the cluster recorded them, from the
// cut of the old binding's node to the new binding's first device write.
// Each comes from a record, never from a poll: the controller's Events
// (microseconds, on its clock), the recorded expiry (whole seconds, rounded
// up), the scheduler's Scheduled Event (microseconds), the pod's status
// (the container's start and the Ready condition, whole seconds: the API
// keeps no more) and the device's own write log.
type Phases struct {
	Cut time.Time
	// Expired is the controller's LeaseExpired Event of the old binding.
	Expired time.Time
	// ExpiryAt is the expiry as recorded (rounded up to the second).
	ExpiryAt time.Time
	Margin   time.Duration
	// HoldOffUntil is the end of the leader's hold-off the re-bind waited
	// for (its LeadershipHoldOff Event), zero when it waited for none.
	HoldOffUntil time.Time
	// Rebound is the decision: its Event goes out, then the binding, then
	// the pod is created, in one pass.
	Rebound   time.Time
	Scheduled time.Time
	// Started is the runtime container's start, Ready the pod's Ready
	// condition: whole seconds.
	Started, Ready time.Time
	// Granted is the first acknowledged grant at the new epoch (the
	// controller's LeaseReestablished Event).
	Granted time.Time
	// FirstWrite is the new epoch's first accepted write in the device log.
	FirstWrite time.Time
	// Warm: the re-bind promoted a warm pod, so nothing was scheduled or
	// started; the grant follows the decision.
	Warm bool
}

// Phase is one named span of a failover.
type Phase struct {
	Name, What string
	D          time.Duration
}

// MarginEnd is when the margin elapsed, counted from the controller's
// Expired: the controller runs it from the grantor's deadline it observed
// (a moment before its Event), or from the recorded expiry (rounded up to
// the second) when it did not observe the deadline itself.
func (p Phases) MarginEnd() time.Time { return p.Expired.Add(p.Margin) }

// List is the failover's phases in order; their sum is cut -> first write.
func (p Phases) List() []Phase {
	decideFrom := p.MarginEnd()
	var holdOff time.Duration
	if p.HoldOffUntil.After(decideFrom) {
		holdOff, decideFrom = p.HoldOffUntil.Sub(decideFrom), p.HoldOffUntil
	}
	if p.Warm {
		return []Phase{
			{"detect", "cut -> the controller's LeaseExpired", p.Expired.Sub(p.Cut)},
			{"margin", "the re-bind margin", p.Margin},
			{"holdoff", "margin end -> the leader's hold-off end (L6)", holdOff},
			{"decide", "margin (or hold-off) end -> Rebound, the warm pod named by the binding", p.Rebound.Sub(decideFrom)},
			{"grant", "Rebound -> the epoch label, then the first acknowledged grant (LeaseReestablished)", p.Granted.Sub(p.Rebound)},
			{"write", "first grant -> first accepted device write", p.FirstWrite.Sub(p.Granted)},
		}
	}
	return []Phase{
		{"detect", "cut -> the controller's LeaseExpired", p.Expired.Sub(p.Cut)},
		{"margin", "the re-bind margin", p.Margin},
		{"holdoff", "margin end -> the leader's hold-off end (L6)", holdOff},
		{"decide", "margin (or hold-off) end -> Rebound, the pod created in the same pass", p.Rebound.Sub(decideFrom)},
		{"schedule", "Rebound -> the scheduler's Scheduled", p.Scheduled.Sub(p.Rebound)},
		{"podstart", "Scheduled -> the container started (whole seconds)", p.Started.Sub(p.Scheduled)},
		{"grant", "container started -> first acknowledged grant (LeaseReestablished)", p.Granted.Sub(p.Started)},
		{"write", "first grant -> first accepted device write", p.FirstWrite.Sub(p.Granted)},
	}
}

// ReadyAfterStart is the container's start -> the pod's Ready (whole
// seconds). Not a link of the chain: the grantor grants as soon as the pod
// has an address, and readiness comes on its own probe's period.
// Zero for a warm pod, ready before the failover.
func (p Phases) ReadyAfterStart() time.Duration {
	if p.Warm {
		return 0
	}
	return p.Ready.Sub(p.Started)
}

// Total is cut -> the new epoch's first accepted device write.
func (p Phases) Total() time.Duration { return p.FirstWrite.Sub(p.Cut) }

// String is the phases on one line.
func (p Phases) String() string {
	var b strings.Builder
	for _, ph := range p.List() {
		fmt.Fprintf(&b, "%s %.2fs, ", ph.Name, ph.D.Seconds())
	}
	if p.Warm {
		b.WriteString("warm (no pod scheduled or started), ")
	}
	fmt.Fprintf(&b, "total %.2fs; aside: ready %.2fs after the start, expiry recorded %.2fs after the Expired", p.Total().Seconds(),
		p.ReadyAfterStart().Seconds(), p.ExpiryAt.Sub(p.Expired).Seconds())
	return b.String()
}

// FailoverPhases reads the records of the failover from epoch old to epoch
// next, whose old node was cut at cut; next's runtime has written to the
// device.
func (u *Unit) FailoverPhases(ctx context.Context, cut time.Time, old, next int64) (Phases, error) {
	p := Phases{Cut: cut}
	got, err := u.Get(ctx)
	if err != nil {
		return p, err
	}
	p.Margin = got.Spec.Availability.RebindMargin()
	b := got.Status.RuntimeBinding
	if b == nil || b.Epoch != next || b.Expiry == nil || b.Expiry.Epoch != old {
		return p, fmt.Errorf("the binding at epoch %d does not carry epoch %d's expiry: %+v", next, old, b)
	}
	p.ExpiryAt = b.Expiry.At.Time
	p.Warm = b.PodUID != ""
	evs, err := u.Events(ctx)
	if err != nil {
		return p, err
	}
	for _, e := range evs {
		at := eventTime(e)
		if at.Before(cut) {
			continue
		}
		switch e.Reason {
		case units.EventLeaseExpired:
			if p.Expired.IsZero() {
				p.Expired = at
			}
		case units.EventLeadershipHoldOff:
			s, _, _ := strings.Cut(strings.TrimPrefix(e.Note, "Waiting for the leadership hold-off until "), ": ")
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				p.HoldOffUntil = t
			}
		case units.EventRebound:
			if p.Rebound.IsZero() {
				p.Rebound = at
			}
		case units.EventLeaseReestablished:
			if p.Granted.IsZero() {
				p.Granted = at
			}
		}
	}
	if !p.Warm {
		if err := u.podPhases(ctx, &p, next); err != nil {
			return p, err
		}
	}
	log, err := u.Writes(ctx)
	if err != nil {
		return p, err
	}
	for _, w := range log {
		if w.Epoch == next && w.Accepted {
			p.FirstWrite = w.Time
			break
		}
	}
	for name, t := range map[string]time.Time{"LeaseExpired": p.Expired, "Rebound": p.Rebound, "Scheduled": p.Scheduled,
		"the container's start": p.Started, "Ready": p.Ready, "LeaseReestablished": p.Granted, "the first write": p.FirstWrite} {
		if t.IsZero() && !(p.Warm && (name == "Scheduled" || name == "the container's start" || name == "Ready")) {
			return p, fmt.Errorf("no record of %s for the failover from epoch %d to %d", name, old, next)
		}
	}
	return p, nil
}

// podPhases reads the scheduling and start of a runtime pod created for
// epoch next.
func (u *Unit) podPhases(ctx context.Context, p *Phases, next int64) error {
	podName := units.PodName(u.Key.Name, next)
	pevs, err := u.PodEvents(ctx)
	if err != nil {
		return err
	}
	for _, e := range pevs {
		if e.Regarding.Name == podName && e.Reason == "Scheduled" && p.Scheduled.IsZero() {
			p.Scheduled = eventTime(e)
		}
	}
	pod, err := u.RuntimePod(ctx, next)
	if err != nil || pod == nil {
		return fmt.Errorf("the runtime pod of epoch %d: %v", next, err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == holdfastv1.RuntimeContainer && cs.State.Running != nil {
			p.Started = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			p.Ready = c.LastTransitionTime.Time
		}
	}
	return nil
}

package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-io/holdfast/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// shrink looks for a smaller part of the seed's schedule that still breaks
// a property (the last few actions alone first, then delta debugging: drop
// chunks, halving their size when none can go), within budget of wall
// time. It returns the
// indices of the actions kept, into the seed's full schedule.
func shrink(cfg Config, seed uint64, full Schedule, v *Violation, budget time.Duration) []int {
	deadline := time.Now().Add(budget)
	var keep []int
	for i, a := range full {
		if a.At <= v.At {
			keep = append(keep, i)
		}
	}
	trial := cfg
	trial.Horizon = min(cfg.Horizon, v.At+2*time.Minute)
	fails := func(idx []int) bool {
		return run(trial, seed, pick(full, idx), false).Violation != nil
	}
	if !fails(keep) {
		keep = keep[:0]
		for i := range full {
			keep = append(keep, i)
		}
		trial.Horizon = cfg.Horizon
	}
	// The cause is mostly among the last actions before the violation:
	// try the last few alone first.
	for k := 1; k <= 8 && k < len(keep) && time.Now().Before(deadline); k++ {
		if tail := keep[len(keep)-k:]; fails(tail) {
			keep = slices.Clone(tail)
			break
		}
	}
	n := 2
	for len(keep) > 0 && time.Now().Before(deadline) {
		chunk := max(1, len(keep)/n)
		removed := false
		for i := 0; i < len(keep) && time.Now().Before(deadline); i += chunk {
			cand := append(append([]int{}, keep[:i]...), keep[min(i+chunk, len(keep)):]...)
			if fails(cand) {
				keep, removed = cand, true
				n = max(n-1, 2)
				break
			}
		}
		if !removed {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(keep))
		}
	}
	return keep
}

// pick is the part of full at idx.
func pick(full Schedule, idx []int) Schedule {
	out := make(Schedule, 0, len(idx))
	for _, i := range idx {
		out = append(out, full[i])
	}
	return out
}

func joinInts(idx []int) string {
	s := make([]string, len(idx))
	for i, x := range idx {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// admissible says whether admission takes a as a new Unit's availability:
// the webhook's own rules, with the lease floor of the grantor timings t.
func admissible(a holdfastv1.Availability, t policy.GrantorTimings) bool {
	path := field.NewPath("spec", "availability")
	return len(policy.AvailabilityErrors(path, &a)) == 0 && policy.LeaseFloorError(path, &a, t) == nil
}

package voters

import (
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// CooldownAndDrainWait are the cooldown and drain wait the controller reads
// from p, for the integration tests (package voters_test) to judge a policy
// the apiserver stored.
func CooldownAndDrainWait(p *holdfastv1.VoterPolicy) (cooldown, drainWait time.Duration) {
	t := timesOf(p)
	return t.cooldown, t.drainWait
}

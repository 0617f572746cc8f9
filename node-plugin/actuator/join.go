package actuator

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// Membership is what a promote asks etcd before it is done, whichever
// actuator started the member (tombstone.ClientEtcd): a started server
// unit, or a Ready etcd pod, says only that an etcd runs, which one
// restarted from other data (a former cluster's, kept in the data
// directory: etcd ignores the join flags then) or one that never joins
// does as well.
type Membership interface {
	// Local is the local member's own answer (its status): its ID and its
	// cluster's ID. A learner answers nothing more (no member list).
	Local(ctx context.Context) (hoststate.Member, error)
	// MemberNames lists the cluster's members as its other members answer
	// it (linearizable), each ID with its name (empty until the member
	// started and published itself), with their cluster ID.
	MemberNames(ctx context.Context) (clusterID string, names map[string]string, err error)
}

// joined says what the local member lacks to be one of the cluster it was
// told to join, "" once it is: the local member answers from its
// endpoint, and the member list its cluster's other members answer is of
// the same cluster ID and lists its member ID, started under node's name
// (a member added but not started has no name yet). An etcd of another
// cluster (a former one's data left in the data directory, or one that
// bootstrapped its own) or one that answers nobody never passes; nor does
// a promote with no etcd client to ask (m nil).
func joined(ctx context.Context, m Membership, node string) string {
	if m == nil {
		return "no etcd client to ask the local member whether it joined"
	}
	local, err := m.Local(ctx)
	if err != nil {
		return fmt.Sprintf("the local etcd member does not answer (%v)", err)
	}
	clusterID, names, err := m.MemberNames(ctx)
	if err != nil {
		return fmt.Sprintf("the cluster's other members do not answer its member list (%v)", err)
	}
	name, listed := names[local.ID]
	switch {
	case clusterID != local.ClusterID:
		return fmt.Sprintf("the local etcd member %s is of cluster %s, not of cluster %s it was told to join", local.ID, local.ClusterID, clusterID)
	case !listed:
		return fmt.Sprintf("the member list of cluster %s does not list the local etcd member %s", clusterID, local.ID)
	case name != node:
		return fmt.Sprintf("the local etcd member %s has not started as %s in cluster %s (its member list names it %q)", local.ID, node, clusterID, name)
	}
	return ""
}

// bound is how long a step waits for what it started before it fails, and
// how soon it looks again meanwhile.
type bound struct {
	clock            clock.PassiveClock
	timeout, recheck time.Duration
	// since names the start the timeout is measured from, for the failure.
	since string
}

// waitOrFail is a wait for what since start: a WaitingError (look again
// after the recheck) until the timeout, then a failure saying what it
// waited for and how long.
func (b bound) waitOrFail(what string, start time.Time) error {
	if waited := b.clock.Since(start); waited >= b.timeout {
		return fmt.Errorf("%s %v after %s (timeout %v)", what, waited.Round(time.Second), b.since, b.timeout)
	}
	return &WaitingError{Reason: "waiting: " + what, RetryAfter: b.recheck}
}

// Package tombstone notices that the local etcd member was removed from its
// cluster and writes the host's tombstone (hoststate), which keeps the
// server unit from ever starting again as that member.
//
// It sees the removal through the etcd client, not the member's log: while
// the local member answers, its ID and cluster ID are recorded; a member
// list of that same cluster, answered by the other members, that no longer
// names the recorded ID is the removal. This works when the host was down
// during the removal too (its member never got to log anything), and it
// never guesses: no answer, or an answer from another cluster, writes
// nothing.
package tombstone

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/periodic"
)

// Etcd is what the watcher asks etcd.
type Etcd interface {
	// Local is the local member's own status: its ID, cluster ID and name.
	Local(ctx context.Context) (hoststate.Member, error)
	// Members lists the member IDs of the cluster as the other members
	// answer it (linearizable), with their cluster ID.
	Members(ctx context.Context) (clusterID string, ids []string, err error)
}

// Watcher writes the tombstone.
type Watcher struct {
	Etcd  Etcd
	State hoststate.State
	// Clock stamps the tombstone and paces the checks.
	Clock clock.WithTicker
	// Every is the check interval.
	Every time.Duration
	// Written, when set, runs after a tombstone is written (the reporter's
	// Kick: the Node says so at once).
	Written func()
}

// FormatID prints a member or cluster ID as etcdctl does.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// Check records the local member and writes the tombstone once it is gone
// from its cluster's member list. It returns whether a tombstone exists.
//
// The whole check, from reading the member to writing the tombstone, holds
// the host's member lock, which finish-demote and rollback hold too: a
// check that read the member before they cleared it cannot write a
// tombstone after they finished.
func (w *Watcher) Check(ctx context.Context) (bool, error) {
	unlock, err := w.State.Lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	return w.CheckLocked(ctx)
}

// CheckLocked is Check for a caller that holds the host's member lock.
func (w *Watcher) CheckLocked(ctx context.Context) (bool, error) {
	st := w.State
	if ts, err := st.Tombstone(); err != nil || ts != nil {
		return ts != nil, err
	}
	recorded, err := st.Member()
	if err != nil {
		return false, err
	}
	// The server recorded its own removal (k3s writes server/db/etcd/
	// tombstone when etcd tells it so): holdfast's tombstone follows from
	// the recorded member, so the Node reports it too.
	if has, err := st.HasServerTombstone(); err != nil || has {
		if err != nil || recorded == nil {
			return has, err
		}
		return w.write(ctx, *recorded, fmt.Sprintf("the server wrote its own tombstone %s", st.ServerTombstonePath()))
	}
	if local, err := w.Etcd.Local(ctx); err == nil {
		if recorded == nil || *recorded != local {
			if err := st.SetMember(local); err != nil {
				return false, err
			}
			klog.FromContext(ctx).Info("Recorded the local etcd member", "member", local.ID, "cluster", local.ClusterID)
			recorded = &local
		}
	}
	if recorded == nil {
		return false, nil
	}
	how := Gone(ctx, w.Etcd, *recorded)
	if how == "" {
		return false, nil
	}
	return w.write(ctx, *recorded, how)
}

// Gone says how the member list, as the other members answer it, shows
// member m removed; "" when it names m, is another cluster's, or does not
// answer (no guess).
func Gone(ctx context.Context, e Etcd, m hoststate.Member) string {
	clusterID, ids, err := e.Members(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Member list unavailable", "err", err)
		return ""
	}
	if clusterID != m.ClusterID || slices.Contains(ids, m.ID) {
		return ""
	}
	return fmt.Sprintf("the member list of cluster %s no longer names member %s", clusterID, m.ID)
}

// write records the removal of member m: it returns whether a tombstone
// exists now.
func (w *Watcher) write(ctx context.Context, m hoststate.Member, how string) (bool, error) {
	ts := holdfastv1.Tombstone{MemberID: m.ID, ClusterID: m.ClusterID, At: metav1.Time{Time: w.Clock.Now()}, How: how}
	if err := w.State.SetTombstone(ts); err != nil {
		return false, err
	}
	klog.FromContext(ctx).Info("Local etcd member was removed: tombstone written", "member", ts.MemberID, "cluster", ts.ClusterID, "how", how)
	if w.Written != nil {
		w.Written()
	}
	return true, nil
}

// Start runs Check every Every until ctx ends (a manager Runnable).
func (w *Watcher) Start(ctx context.Context) error {
	if w.Clock == nil {
		w.Clock = clock.RealClock{}
	}
	if w.Every == 0 {
		w.Every = 5 * time.Second
	}
	return periodic.Run(ctx, w.Clock, w.Every, func(ctx context.Context) {
		if _, err := w.Check(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Tombstone check failed")
		}
	})
}

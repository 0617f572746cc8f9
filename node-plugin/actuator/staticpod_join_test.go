package actuator_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// etcdAnswers stands in for etcd at its client API (actuator.Membership):
// the local member's own answer, and the member list the cluster's other
// members answer.
type etcdAnswers struct {
	mu        sync.Mutex
	local     hoststate.Member
	localErr  error
	clusterID string
	names     map[string]string
	listErr   error
}

// joinedAnswers is etcd once member a4 has joined cluster c1 as cp-4.
func joinedAnswers() *etcdAnswers {
	e := &etcdAnswers{}
	e.joined()
	return e
}

func (e *etcdAnswers) joined() {
	e.local, e.localErr = hoststate.Member{ID: "a4", ClusterID: "c1"}, nil
	e.clusterID, e.names, e.listErr = "c1", map[string]string{"a1": "cp-1", "a2": "cp-2", "a4": spNode}, nil
}

func (e *etcdAnswers) Local(context.Context) (hoststate.Member, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.local, e.localErr
}

func (e *etcdAnswers) MemberNames(context.Context) (string, map[string]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clusterID, e.names, e.listErr
}

func (e *etcdAnswers) set(change func(*etcdAnswers)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	change(e)
}

// TestStaticPodPromoteIsDoneOnlyOnceTheMemberJoinedItsCluster: a Ready etcd
// pod is not a joined member. Until the local member answers, started as
// this node, and the cluster's member list (of the same cluster ID) names
// it, the promote waits saying for what, and writes no kube-apiserver
// manifest, which would serve whatever that etcd holds.
func TestStaticPodPromoteIsDoneOnlyOnceTheMemberJoinedItsCluster(t *testing.T) {
	h := newSPHost(t)
	ctx := context.Background()
	_, err := h.act.Promote(ctx, spJoin)
	wantWaiting(t, err, "not published")
	h.kubelet.sync(t, corev1.PodRunning)
	for _, tc := range []struct {
		name   string
		change func(*etcdAnswers)
		want   string
	}{
		{"the local member does not answer", func(e *etcdAnswers) { e.localErr = errors.New("connection refused") },
			"the local etcd member does not answer (connection refused)"},
		{"an etcd restarted from a former cluster's data", func(e *etcdAnswers) { e.local = hoststate.Member{ID: "f9", ClusterID: "c9"} },
			"the local etcd member f9 is of cluster c9, not of cluster c1 it was told to join"},
		{"a member added but not started", func(e *etcdAnswers) { e.names["a4"] = "" },
			`the local etcd member a4 has not started as cp-4 in cluster c1 (its member list names it "")`},
		{"another member's name", func(e *etcdAnswers) { e.names["a4"] = "cp-1" }, "has not started as cp-4"},
		{"the cluster does not list it", func(e *etcdAnswers) { delete(e.names, "a4") },
			"the member list of cluster c1 does not list the local etcd member a4"},
		{"the cluster does not answer", func(e *etcdAnswers) { e.listErr = errors.New("context deadline exceeded") },
			"the cluster's other members do not answer its member list (context deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.etcd.set(func(e *etcdAnswers) { e.joined(); tc.change(e) })
			_, err := h.act.Promote(ctx, spJoin)
			wantWaiting(t, err, tc.want)
			if exists(t, h.manifest(actuator.APIServerManifest)) {
				t.Fatal("the kube-apiserver manifest was written for a member that has not joined")
			}
		})
	}
	// Past the timeout the wait fails, saying what it waited for.
	h.clock.Step(h.cfg.Timeout)
	_, err = h.act.Promote(ctx, spJoin)
	if _, waiting := actuator.IsWaiting(err); waiting || err == nil || !strings.Contains(err.Error(), "do not answer its member list") {
		t.Fatalf("past the timeout the join wait fails with its state, got %v", err)
	}
	h.etcd.set((*etcdAnswers).joined)
	if _, err := h.act.Promote(ctx, spJoin); err != nil {
		t.Fatalf("promote of a joined member: %v", err)
	}
	if !exists(t, h.manifest(actuator.APIServerManifest)) {
		t.Fatal("the kube-apiserver manifest is not written once the member joined")
	}
}

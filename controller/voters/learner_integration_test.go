//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestTheCandidatesMemberIsALearnerUntilItsServerStarts: a member at the
// candidate's peer URL that votes before this swap asked its server to
// start (here added as a voter by hand, `etcdctl member add` without
// --learner, while the swap waits for a job on the candidate) is never
// adopted as the swap's learner: the swap rolls back at once, without
// waiting for a deadline, removes the member while the other voters are
// healthy and never asks the candidate to start its server; the members
// end as before, one cluster ID, every write served.
func TestTheCandidatesMemberIsALearnerUntilItsServerStarts(t *testing.T) {
	c := newCluster(t, []string{"l1", "l2", "l3"}, []string{"l4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "l1", "l2", "l3")
	cli := c.client("l1", "l2", "l3")
	before, _, clusterID := etcdMembers(t, cli)
	w := startWriter(cli)
	ctx := context.Background()

	// A job on the candidate holds the swap before its learner is added.
	job := startJob(t, "l4", "hold-job")
	name := createSwap(t, "l1", "l4")
	waitWaiting(t, name, holdfastv1.SwapReasonWorkloadPodsRunning, time.Minute)

	// Someone adds the candidate's peer URL as a voter: four voters, one
	// never started, so one more voter down would lose quorum.
	// etcd takes a voter only once its leader has been connected to every
	// voter for five seconds ("unhealthy cluster" until then).
	var added *clientv3.MemberAddResponse
	poll.Until(t, time.Minute, "l4 added as a voter", func() (bool, string) {
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		added, err = cli.MemberAdd(mctx, []string{c.hosts["l4"].member.PeerURL})
		return err == nil, fmt.Sprint(err)
	})
	if added.Member.IsLearner {
		t.Fatal("MemberAdd added a learner")
	}
	if err := env.Client.Delete(ctx, job, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}

	// No clock advance: the rollback does not wait for a deadline.
	s := waitPhase(t, name, holdfastv1.SwapRolledBack, 2*time.Minute)
	h := history(s)
	t.Logf("history:\n%s", h)
	if !strings.Contains(h, holdfastv1.SwapReasonMemberNotLearner) {
		t.Errorf("history does not say %s", holdfastv1.SwapReasonMemberNotLearner)
	}
	for _, never := range []string{holdfastv1.SwapReasonLearnerAdopted, holdfastv1.SwapReasonServerRequested, holdfastv1.SwapReasonPromoted} {
		if strings.Contains(h, never) {
			t.Errorf("the swap went on with the voter as its learner: history says %s", never)
		}
	}
	after, learners, id := etcdMembers(t, cli)
	if !slices.Equal(after, before) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the rollback: voters %v learners %v cluster %x, want %v, none, %x", after, learners, id, before, clusterID)
	}
	h4 := c.hosts["l4"]
	h4.mu.Lock()
	starts := h4.starts
	h4.mu.Unlock()
	if starts > 0 {
		t.Errorf("l4's server was started %d times", starts)
	}
	if role, _ := h4.state.Role(); role != holdfastv1.RoleAgent {
		t.Errorf("l4's role file says %q", role)
	}
	n4 := getNode(t, "l4")
	if _, ok := n4.Labels[holdfastv1.LabelEtcdRole]; ok || n4.Spec.Unschedulable || hasSwapTaint(n4) {
		t.Errorf("l4 left with the etcd label, cordoned or tainted: %v %v %v", n4.Labels, n4.Spec.Unschedulable, n4.Spec.Taints)
	}
	if n1 := getNode(t, "l1"); n1.Spec.Unschedulable || n1.Labels[holdfastv1.LabelDesiredRole] != "" {
		t.Errorf("l1 was touched: cordoned %v desired role %q", n1.Spec.Unschedulable, n1.Labels[holdfastv1.LabelDesiredRole])
	}
	checkWriter(t, w)
}

// startJob creates a workload pod (a job: restartPolicy Never) on node,
// which a swap waits for and never evicts; deleted at the test's end.
func startJob(t testing.TB, node, name string) *corev1.Pod {
	t.Helper()
	job := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: name},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "job", Image: "example.invalid/job:1"}}}}
	if err := env.Client.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), job, client.GracePeriodSeconds(0)) })
	return job
}

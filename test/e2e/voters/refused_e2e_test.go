//go:build e2e

package voters

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestRoleSwapRefused is the role_swap_refused scenario. It SIGSTOPs a voter
// of the apiserver's own etcd (not the leader, not the one asked out) and
// asks for a swap before the gates: it is
// refused, by the webhook (etcd not healthy, or VoterPolicy status too old to
// trust: a paused member keeps kube-apiserver and so the voters role away for
// a while) or, when admitted, by the voters role before it touches etcd
// (phase Refused, GatesPassed False, a Warning Event). Nothing changes: the
// same members, one cluster ID, no Lease, no role label; no acknowledged
// write is lost. After SIGCONT the same swap succeeds.
func TestRoleSwapRefused(t *testing.T) {
	ctx, cli, before, clusterID := openDrill(t)
	leader := voterPolicy(t).Status.Leader
	out, in := before[0], nonVoter(t, before)
	paused := ""
	for _, v := range before {
		if v != out && v != leader {
			paused = v
			break
		}
	}
	if paused == "" {
		t.Fatalf("no voter to pause: voters %v, leader %s, out %s", before, leader, out)
	}
	// The writer and the quorum sampler use a client on the members that
	// stay: a client whose connection is pinned to the paused member keeps
	// it (its TCP connection stays up) and times out on every attempt while
	// the other two hold quorum and take writes. The sampler still asks the
	// paused member too.
	live := etcdClientOn(t, except(before, paused)...)
	x := etcdwatch.Watch(live, "/holdfast-writer/refused-paused/")

	resume, err := world.Nodes[paused].Host.PauseMember()
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	pausedAt := time.Now()
	t.Logf("%s %s's etcd member SIGSTOPped (leader %s); asking for %s -> %s", pausedAt.UTC().Format("15:04:05.000"), paused, leader, out, in)

	// Ask until the cluster answers: an apiserver that cannot reach its
	// etcd answers with timeouts, which are no verdict.
	var name, by string
	deadline := time.Now().Add(4 * time.Minute)
	for name == "" && by == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no verdict on the swap within 4m of the pause; voters role log:\n%s", world.VotersLog(30))
		}
		n, err := createSwap(t, out, in)
		switch {
		case err == nil:
			name = n
			t.Logf("%s admitted as %s (%.1fs after the pause): the voters role must refuse it", time.Now().UTC().Format("15:04:05.000"), n,
				time.Since(pausedAt).Seconds())
		case apierrors.IsForbidden(err) && (strings.Contains(err.Error(), "status.observedTime") || strings.Contains(err.Error(), "etcd is not healthy")):
			by = err.Error()
			t.Logf("%s refused by the webhook (%.1fs after the pause): %v", time.Now().UTC().Format("15:04:05.000"),
				time.Since(pausedAt).Seconds(), err)
		default:
			t.Logf("%s no verdict yet: %v", time.Now().UTC().Format("15:04:05.000"), err)
			time.Sleep(3 * time.Second)
		}
	}
	if by != "" {
		if strings.Contains(by, "etcd is not healthy") && !strings.Contains(by, paused) {
			t.Errorf("the refusal says etcd is unhealthy without naming the paused voter %s: %s", paused, by)
		}
		var swaps holdfastv1.VoterSwapList
		if err := listWithRetry(ctx, &swaps); err != nil {
			t.Fatal(err)
		}
		for _, s := range swaps.Items {
			if !s.Status.Phase.Finished() {
				t.Errorf("a refused request left VoterSwap %s (%s)", s.Name, s.Status.Phase)
			}
		}
	} else {
		s := waitPhase(t, name, holdfastv1.SwapRefused, 4*time.Minute, nil)
		t.Logf("refused by the voters role:\n%s", history(s))
		if !strings.Contains(history(s), paused) {
			t.Errorf("the refusal does not name the paused voter %s", paused)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionGatesPassed); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("GatesPassed %+v, want False", c)
		}
		// The apiserver fails requests on and off while a member of its own
		// etcd is paused; the event recorder retries for about two minutes.
		poll.Until(t, 3*time.Minute, "a Warning Event on the refused swap", func() (bool, string) {
			var evs eventsv1.EventList
			if err := world.Client.List(ctx, &evs); err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Regarding.Kind == "VoterSwap" && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning &&
					strings.Contains(e.Note, paused) {
					return true, ""
				}
			}
			return false, "none yet"
		})
	}

	// Nothing was touched, the member still paused.
	after, learners, id := etcdwatch.MembersOf(t, live)
	if !slices.Equal(after, before) || len(learners) > 0 || id != clusterID {
		t.Errorf("while %s is paused: voters %v learners %v cluster %x; want %v, none, %x", paused, after, learners, id, before, clusterID)
	}
	poll.Until(t, 2*time.Minute, "the swap Lease free", func() (bool, string) {
		h, err := swapLeaseHolderErr(ctx)
		if err != nil {
			return false, err.Error()
		}
		return h == "", "held by " + h
	})
	for _, n := range []string{out, in} {
		node, err := getNodeErr(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		_, etcdLabel := node.Labels[holdfastv1.LabelEtcdRole]
		if node.Labels[holdfastv1.LabelDesiredRole] != "" || node.Annotations[holdfastv1.AnnotationRoleStep] != "" || node.Spec.Unschedulable ||
			etcdLabel != (n == out) {
			t.Errorf("%s was changed: desired role %q, role step %q, cordoned %v, etcd label %v", n, node.Labels[holdfastv1.LabelDesiredRole],
				node.Annotations[holdfastv1.AnnotationRoleStep], node.Spec.Unschedulable, etcdLabel)
		}
	}

	resume()
	resumed = true
	t.Logf("%s %s resumed after %v", time.Now().UTC().Format("15:04:05.000"), paused, time.Since(pausedAt).Round(time.Second))
	x.Check(t)
	if err := world.WaitVotersHealthy(ctx, 4*time.Minute, before...); err != nil {
		t.Fatal(err)
	}

	// Afterwards the same swap goes through.
	y := etcdwatch.Watch(cli, "/holdfast-writer/refused-paused-after/")
	var n2 string
	poll.Until(t, 2*time.Minute, "the swap admitted after the resume", func() (bool, string) {
		n, err := createSwap(t, out, in)
		if err != nil {
			return false, err.Error()
		}
		n2 = n
		return true, ""
	})
	s := waitPhase(t, n2, holdfastv1.SwapSucceeded, 6*time.Minute, nil)
	y.Check(t)
	after = wantSwapped(t, cli, before, out, in, clusterID, s)
	if err := world.WaitVotersHealthy(ctx, 2*time.Minute, after...); err != nil {
		t.Error(err)
	}
}

// etcdClientOn is a client on these nodes' members only.
func etcdClientOn(t *testing.T, nodes ...string) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, n := range nodes {
		eps = append(eps, world.Nodes[n].Host.ClientURL)
	}
	c, err := world.EtcdClient(eps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func voterPolicy(t *testing.T) *holdfastv1.VoterPolicy {
	t.Helper()
	p := &holdfastv1.VoterPolicy{}
	if err := world.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The apiserver may still be recovering from the pause: reads are retried
// for a while before they count as a failure.
func retryRead(ctx context.Context, read func() error) error {
	var err error
	if cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
		err = read()
		return err == nil || apierrors.IsNotFound(err), nil
	}) != nil {
		return errors.Join(errors.New("the apiserver did not answer for 2m"), err)
	}
	return err
}

func listWithRetry(ctx context.Context, l client.ObjectList) error {
	return retryRead(ctx, func() error { return world.Client.List(ctx, l) })
}

func getNodeErr(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	return n, retryRead(ctx, func() error { return world.Client.Get(ctx, client.ObjectKey{Name: name}, n) })
}

func swapLeaseHolderErr(ctx context.Context) (string, error) {
	l := &coordinationv1.Lease{}
	err := retryRead(ctx, func() error {
		return world.Client.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l)
	})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return policy.SwapLeaseHolder(l), nil
}

//go:build e2e

package voters

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
)

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := world.EtcdClient(world.EtcdEndpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// openDrill is every voter drill's start: an etcd client, the voters (no
// learner), the cluster ID, and all of them healthy; the drill's wall time
// is logged at its end.
func openDrill(t *testing.T) (ctx context.Context, cli *clientv3.Client, voters []string, clusterID uint64) {
	t.Helper()
	start := time.Now()
	t.Cleanup(func() { t.Logf("drill wall time %v", time.Since(start).Round(time.Second)) })
	ctx = context.Background()
	cli = etcdClient(t)
	voters, learners, clusterID := etcdwatch.MembersOf(t, cli)
	if len(learners) > 0 {
		t.Fatalf("start: voters %v learners %v", voters, learners)
	}
	if err := world.WaitVotersHealthy(ctx, 2*time.Minute, voters...); err != nil {
		t.Fatal(err)
	}
	return ctx, cli, voters, clusterID
}

func createSwap(t *testing.T, out, in string) (string, error) {
	t.Helper()
	s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "swap-" + out + "-"},
		Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: "e2e drill", Origin: holdfastv1.SwapManual}}
	err := world.Client.Create(context.Background(), s)
	return s.Name, err
}

// swapSucceeds asks for the swap of out for in and waits within for it to
// succeed, each step it passes given to onStep (nil: none).
func swapSucceeds(t *testing.T, out, in string, within time.Duration, onStep func(step string)) *holdfastv1.VoterSwap {
	t.Helper()
	name, err := createSwap(t, out, in)
	if err != nil {
		t.Fatalf("creating the swap %s -> %s: %v", out, in, err)
	}
	return waitPhase(t, name, holdfastv1.SwapSucceeded, within, onStep)
}

// wantSwapped checks etcd's own vote after the swap s of out for in: the
// voters before but out, and in; no learner; the one cluster ID. It returns
// the voters.
func wantSwapped(t *testing.T, cli *clientv3.Client, before []string, out, in string, clusterID uint64, s *holdfastv1.VoterSwap) []string {
	t.Helper()
	after, learners, id := etcdwatch.MembersOf(t, cli)
	want := slices.Sorted(slices.Values(append(except(before, out), in)))
	if !slices.Equal(after, want) || len(learners) > 0 || id != clusterID {
		t.Fatalf("after the swap %s -> %s: voters %v learners %v cluster %x; want %v, none, %x\nhistory:\n%s", out, in, after, learners, id, want, clusterID, history(s))
	}
	return after
}

func except(s []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(v string) bool { return v == x })
}

// logStep logs a step the swap passes, with the wall time.
func logStep(t *testing.T, step string) {
	t.Helper()
	t.Logf("%s step %s", time.Now().UTC().Format("15:04:05.000"), step)
}

func getSwap(t *testing.T, name string) *holdfastv1.VoterSwap {
	t.Helper()
	s := &holdfastv1.VoterSwap{}
	if err := world.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func describe(s *holdfastv1.VoterSwap) string {
	out := fmt.Sprintf("phase %s step %s outcome %s", s.Status.Phase, s.Status.Step, s.Status.Outcome)
	if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing); c != nil {
		out += fmt.Sprintf("; progressing %s %s: %s", c.Status, c.Reason, c.Message)
	}
	return out
}

func history(s *holdfastv1.VoterSwap) string {
	var b strings.Builder
	for _, h := range s.Status.History {
		fmt.Fprintf(&b, "  %s %-14s %-10s %s: %s\n", h.At.UTC().Format("15:04:05.000"), h.Step, h.Outcome, h.Reason, h.Message)
	}
	return b.String()
}

// nodeReports is every Node's role labels and holdfast-node report, for a
// failure message.
func nodeReports() string {
	var nodes corev1.NodeList
	if err := world.Client.List(context.Background(), &nodes); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range nodes.Items {
		_, etcdRole := n.Labels[holdfastv1.LabelEtcdRole]
		fmt.Fprintf(&b, "  %s: desired %q etcd-label %v step %q cordoned %v tombstone %q\n    report %s\n", n.Name,
			n.Labels[holdfastv1.LabelDesiredRole], etcdRole, n.Annotations[holdfastv1.AnnotationRoleStep],
			n.Spec.Unschedulable, n.Annotations[holdfastv1.AnnotationTombstone], n.Annotations[holdfastv1.AnnotationActuator])
	}
	return b.String()
}

// waitPhase waits for the swap to finish in phase; each step it passes is
// given to onStep (nil: none).
func waitPhase(t *testing.T, name string, phase holdfastv1.SwapPhase, within time.Duration, onStep func(step string)) *holdfastv1.VoterSwap {
	t.Helper()
	deadline := time.Now().Add(within)
	lastStep := ""
	for {
		// A read the apiserver cannot answer (its own etcd member paused)
		// is no verdict: tried again until the deadline.
		s := &holdfastv1.VoterSwap{}
		if err := world.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("swap %s not %s within %v; last read: %v", name, phase, within, err)
			}
			time.Sleep(time.Second)
			continue
		}
		if string(s.Status.Step) != lastStep {
			lastStep = string(s.Status.Step)
			if onStep != nil {
				onStep(lastStep)
			}
		}
		if s.Status.Phase.Finished() {
			if s.Status.Phase != phase {
				t.Fatalf("swap %s finished %s, want %s: %s\nhistory:\n%s\nnodes:\n%s", name, s.Status.Phase, phase, describe(s), history(s), nodeReports())
			}
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("swap %s not %s within %v: %s\nhistory:\n%s\nnodes:\n%s\nvoters role log:\n%s", name, phase, within, describe(s), history(s),
				nodeReports(), world.VotersLog(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := world.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func swapLeaseHolder(t *testing.T) string {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := world.Client.Get(context.Background(), client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err != nil {
		return ""
	}
	return policy.SwapLeaseHolder(l)
}

// swapEvents are the reasons of the Normal Events regarding the swap.
func swapEvents(t *testing.T, name string) map[string]bool {
	t.Helper()
	var evs eventsv1.EventList
	if err := world.Client.List(context.Background(), &evs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if e.Regarding.Kind == "VoterSwap" && e.Regarding.Name == name {
			seen[e.Reason] = true
		}
	}
	return seen
}

// metrics is the voters role's /metrics text.
func metrics(t *testing.T) string {
	t.Helper()
	resp, err := world.HTTPClient().Get(world.Voters().Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricLine is the first sample line of name whose labels contain every
// one of labels, "" when there is none.
func metricLine(text, name string, labels ...string) string {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, want := range labels {
			ok = ok && strings.Contains(l, want)
		}
		if ok {
			return l
		}
	}
	return ""
}

// others are the IPs of the etcd nodes but node.
func otherEtcdIPs(node string) []string {
	var out []string
	for _, name := range world.NodeNames {
		if n := world.Nodes[name]; n.Host != nil && name != node {
			out = append(out, n.IP)
		}
	}
	return out
}

// nonVoter is the etcd node that is not a voter now.
func nonVoter(t *testing.T, voters []string) string {
	t.Helper()
	for _, name := range world.NodeNames {
		if world.Nodes[name].Host != nil && !slices.Contains(voters, name) {
			return name
		}
	}
	t.Fatalf("every etcd node is a voter: %v", voters)
	return ""
}

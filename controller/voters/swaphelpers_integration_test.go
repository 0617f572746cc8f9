//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

func getSwap(t testing.TB, name string) *holdfastv1.VoterSwap {
	t.Helper()
	s := &holdfastv1.VoterSwap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func describe(s *holdfastv1.VoterSwap) string {
	out := fmt.Sprintf("phase %s step %s outcome %s", s.Status.Phase, s.Status.Step, s.Status.Outcome)
	if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing); c != nil {
		out += fmt.Sprintf("; progressing %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if n := len(s.Status.History); n > 0 {
		h := s.Status.History[n-1]
		out += fmt.Sprintf("; last %s %s %s: %s", h.Step, h.Outcome, h.Reason, h.Message)
	}
	return out
}

// waitPhase waits for the swap to finish in phase.
func waitPhase(t testing.TB, name string, phase holdfastv1.SwapPhase, within time.Duration) *holdfastv1.VoterSwap {
	t.Helper()
	var s *holdfastv1.VoterSwap
	// What the nodes said the last time the swap waited, for a failure.
	var waited string
	poll.Until(t, within, "swap "+name+" "+string(phase), func() (bool, string) {
		s = getSwap(t, name)
		if s.Status.Phase.Finished() && s.Status.Phase != phase {
			t.Fatalf("swap %s finished %s, want %s: %s\nhistory:\n%s\nnodes while it waited:\n%s", name, s.Status.Phase, phase, describe(s), history(s), waited)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, holdfastv1.ConditionProgressing); c != nil && c.Reason == holdfastv1.SwapReasonWaitingForNodePlugin {
			waited = c.Message + "\n" + nodeReports(t)
		}
		return s.Status.Phase == phase, describe(s) + "\n" + nodeReports(t)
	})
	return s
}

// nodeReports prints every Node's role labels, role step and node plugin
// report, for a failure message.
func nodeReports(t testing.TB) string {
	var nodes corev1.NodeList
	if err := env.Client.List(context.Background(), &nodes); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range nodes.Items {
		_, etcdRole := n.Labels[holdfastv1.LabelEtcdRole]
		fmt.Fprintf(&b, "  %s: desired %q etcd-label %v step %q/%q cordoned %v tombstone %q\n    report %s\n", n.Name,
			n.Labels[holdfastv1.LabelDesiredRole], etcdRole, n.Annotations[holdfastv1.AnnotationRoleSwap], n.Annotations[holdfastv1.AnnotationRoleStep],
			n.Spec.Unschedulable, n.Annotations[holdfastv1.AnnotationTombstone], n.Annotations[holdfastv1.AnnotationActuator])
	}
	return b.String()
}

func history(s *holdfastv1.VoterSwap) string {
	var b strings.Builder
	for _, h := range s.Status.History {
		fmt.Fprintf(&b, "  %s %s %s %s: %s\n", h.At.Format("15:04:05.000"), h.Step, h.Outcome, h.Reason, h.Message)
	}
	return b.String()
}

// waitHealthyStatus waits for the controller to report etcd healthy with
// these voters (the webhook's gates read that status).
func waitHealthyStatus(t testing.TB, voterNames ...string) {
	t.Helper()
	want := slices.Clone(voterNames)
	slices.Sort(want)
	poll.Until(t, time.Minute, "VoterPolicy status healthy with voters "+strings.Join(want, ","), func() (bool, string) {
		p := &holdfastv1.VoterPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionEtcdHealthy)
		if c == nil {
			return false, "no EtcdHealthy condition"
		}
		return c.Status == metav1.ConditionTrue && slices.Equal(p.Status.Voters, want), fmt.Sprintf("%s %s: %s; voters %v", c.Status, c.Reason, c.Message, p.Status.Voters)
	})
}

// createSwap asks for a manual swap as an administrator would.
func createSwap(t testing.TB, out, in string) string {
	t.Helper()
	var name string
	// The incoming host's node plugin reports it provisioned on its first
	// pass; until the webhook has read that report, admission refuses the
	// swap for it. Any other refusal fails the test.
	poll.Until(t, 30*time.Second, "the swap "+out+" -> "+in+" admitted", func() (bool, string) {
		s := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{GenerateName: "swap-" + out + "-"},
			Spec: holdfastv1.VoterSwapSpec{Outgoing: out, Incoming: in, Reason: "test", Origin: holdfastv1.SwapManual}}
		err := env.Client.Create(context.Background(), s)
		switch {
		case err == nil:
			name = s.Name
			return true, ""
		case in != "" && strings.Contains(err.Error(), in+" is not provisioned"):
			return false, err.Error()
		}
		t.Fatalf("creating the swap %s -> %s: %v", out, in, err)
		return false, ""
	})
	return name
}

// bindCandidate binds the swap's voter-candidate pod to node, as
// holdfast-scheduler would.
func bindCandidate(t testing.TB, swap, node string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{}
	poll.Until(t, 30*time.Second, "voter-candidate pod", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: voters.CandidatePodName(swap)}, pod)
		return err == nil, fmt.Sprint(err)
	})
	if pod.Spec.SchedulerName != holdfastv1.SchedulerName || pod.Labels[holdfastv1.LabelRole] != holdfastv1.RoleVoterCandidate {
		t.Fatalf("candidate pod %s: scheduler %q labels %v", pod.Name, pod.Spec.SchedulerName, pod.Labels)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := env.ClientAs(t, schedulerUser, nil).SubResource("binding").Create(ctx, pod, b); err != nil {
		t.Fatal(err)
	}
}

// etcdMembers are etcd's own voters and learners, by name, and its
// cluster ID, as a client of names answers.
func etcdMembers(t testing.TB, cli *clientv3.Client) (voterNames, learners []string, clusterID uint64) {
	t.Helper()
	v, l, id, err := etcdwatch.Members(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	return v, l, id
}

func getNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func getLease(t testing.TB) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startWriter puts a key every 50ms and reads it back (test/etcdwatch),
// each attempt given a second on these loopback members.
func startWriter(cli *clientv3.Client) *etcdwatch.Writer {
	return etcdwatch.StartWriter(cli, "/holdfast-writer/", time.Second)
}

// checkWriter stops the writer and asserts no write failed, no
// acknowledged write is lost and its history of puts and gets is
// linearizable; it returns what the writer saw.
func checkWriter(t testing.TB, w *etcdwatch.Writer) etcdwatch.Report {
	t.Helper()
	r, err := w.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", r.Lost)
	}
	if len(r.Failed) > 0 {
		t.Errorf("%d writes failed (never acknowledged within 10s)", len(r.Failed))
	}
	if r.NotLinearizable != nil {
		t.Errorf("the writer's history: %v", r.NotLinearizable)
	}
	if r.Acked < 20 {
		t.Errorf("only %d writes acknowledged", r.Acked)
	}
	t.Logf("writer: %s", r)
	return r
}

func hostDataMovedAside(h *host) bool {
	_, err := os.Stat(filepath.Join(h.state.MovedAside(), "member"))
	return err == nil
}

func hasSwapTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == holdfastv1.TaintVoterSwap {
			return true
		}
	}
	return false
}

// labelNode sets a label as an administrator.
func labelNode(t testing.TB, node, key, value string) {
	t.Helper()
	n := getNode(t, node)
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels[key] = value
	if err := env.Client.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}

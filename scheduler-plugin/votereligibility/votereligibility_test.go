package votereligibility

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

var now = time.Date(2026, 9, 3, 10, 0, 0, 0, time.UTC)

const cluster = "cdf818194e3a8c32"

// fitness is a node plugin's report (holdfastv1.Fitness): fsync p99 and
// the round trips to two voters' peers, in milliseconds.
func fitness(fsync, rtt float64, at time.Time) string {
	return fmt.Sprintf(`{"fsyncP99Micros":%d,"fsyncSamples":200,"peerRTTMicros":{"https://10.0.0.1:2380":%d,"https://10.0.0.2:2380":%d},"at":%q}`,
		int64(fsync*1000), int64(rtt*1000)/2, int64(rtt*1000), at.Format(time.RFC3339))
}

func tombstone(clusterID string) string {
	return fmt.Sprintf(`{"memberID":"8e9e05c52164694d","clusterID":%q}`, clusterID)
}

func fleet() []*corev1.Node {
	return []*corev1.Node{
		plugintest.EligibleNode("fit-1").Annotation(holdfastv1.AnnotationFitness, fitness(2, 5, now.Add(-time.Minute))).Obj(),
		plugintest.EligibleNode("fit-2").Annotation(holdfastv1.AnnotationFitness, fitness(8, 40, now.Add(-time.Minute))).Obj(),
		plugintest.EligibleNode("fit-3").Annotation(holdfastv1.AnnotationFitness, fitness(5, 25, now.Add(-time.Minute))).Obj(),
		plugintest.EligibleNode("stale").Annotation(holdfastv1.AnnotationFitness, fitness(1, 1, now.Add(-2*time.Hour))).Obj(),
		plugintest.EligibleNode("garbled-fitness").Annotation(holdfastv1.AnnotationFitness, "fast").Obj(),
		plugintest.EligibleNode("no-fitness").Obj(),
		plugintest.EligibleNode("peer-silent").Annotation(holdfastv1.AnnotationFitness,
			fmt.Sprintf(`{"fsyncP99Micros":100,"fsyncSamples":200,"peerRTTMicros":{"https://10.0.0.1:2380":-1},"at":%q}`, now.Format(time.RFC3339))).Obj(),
		plugintest.EligibleNode("no-samples").Annotation(holdfastv1.AnnotationFitness,
			fmt.Sprintf(`{"fsyncP99Micros":0,"fsyncSamples":0,"peerRTTMicros":{"https://10.0.0.1:2380":100},"at":%q}`, now.Format(time.RFC3339))).Obj(),
		plugintest.ReadyNode("not-eligible").Annotation(holdfastv1.AnnotationProvisioned, "true").Obj(),
		plugintest.ReadyNode("unprovisioned").Label(holdfastv1.LabelVoterEligible, "true").Obj(),
		plugintest.EligibleNode("pinned").Label(holdfastv1.LabelPinned, "true").Obj(),
		plugintest.EligibleNode("unpinned").Label(holdfastv1.LabelPinned, "false").Obj(),
		plugintest.EligibleNode("not-ready").Condition(corev1.NodeReady, corev1.ConditionUnknown, "NodeStatusUnknown", "").Obj(),
		plugintest.EligibleNode("voter-1").Obj(),
		plugintest.EligibleNode("learner-1").Obj(),
		plugintest.EligibleNode("etcd-labelled").Label(holdfastv1.LabelEtcdRole, "true").Obj(),
		plugintest.EligibleNode("tomb-this").Annotation(holdfastv1.AnnotationTombstone, tombstone(cluster)).Obj(),
		plugintest.EligibleNode("tomb-other").Annotation(holdfastv1.AnnotationTombstone, tombstone("0000000000000001")).Obj(),
		plugintest.EligibleNode("tomb-garbled").Annotation(holdfastv1.AnnotationTombstone, "removed").Obj(),
	}
}

func build(t *testing.T, objs ...client.Object) (*VoterEligibility, fwk.Handle) {
	t.Helper()
	args, err := getArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	fh, _ := plugintest.Handle(t, fleet(), nil)
	return newPlugin(args, plugintest.Client(interceptor.Funcs{}, objs...), testingclock.NewFakePassiveClock(now)), fh
}

func statusString(s *fwk.Status) string {
	if s.IsSuccess() {
		return "Success"
	}
	return fmt.Sprintf("%s: %s", s.Code(), s.Message())
}

func candidate() *corev1.Pod {
	return plugintest.VoterCandidatePod("kube-system", "voter-candidate-x").Obj()
}

func TestPreFilter(t *testing.T) {
	bad := plugintest.MakePolicy(cluster).Obj()
	bad.Spec.EligibleSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}
	for _, tc := range []struct {
		name   string
		policy *holdfastv1.VoterPolicy
		pod    *corev1.Pod
		want   string
	}{
		{name: "not a candidate", pod: st.MakePod().Name("web").Obj(), want: "Skip: "},
		{name: "a runtime pod is not a candidate", pod: plugintest.RuntimePod("plant", "boiler-1", 1).Obj(), want: "Skip: "},
		{name: "no policy", pod: candidate(), want: "UnschedulableAndUnresolvable: no VoterPolicy default"},
		{name: "invalid selector", policy: bad, pod: candidate(), want: `UnschedulableAndUnresolvable: VoterPolicy default has an invalid spec.eligibleSelector: "Near" is not a valid label selector operator`},
		{name: "policy present", policy: plugintest.MakePolicy(cluster).Obj(), pod: candidate(), want: "Success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.policy != nil {
				objs = append(objs, tc.policy)
			}
			pl, _ := build(t, objs...)
			_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nil)
			if got := statusString(status); got != tc.want {
				t.Errorf("PreFilter = %q, want %q", got, tc.want)
			}
		})
	}
}

func filterAll(t *testing.T, policy *holdfastv1.VoterPolicy) map[string]string {
	t.Helper()
	pl, fh := build(t, policy)
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, candidate(), nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	got := map[string]string{}
	for _, n := range fleet() {
		got[n.Name] = statusString(pl.Filter(context.Background(), state, candidate(), plugintest.NodeInfo(t, fh, n.Name)))
	}
	return got
}

const refused = "UnschedulableAndUnresolvable: "

func TestFilter(t *testing.T) {
	got := filterAll(t, plugintest.MakePolicy(cluster, "voter-1").Learners("learner-1").Obj())
	want := map[string]string{
		"fit-1":           "Success",
		"fit-2":           "Success",
		"fit-3":           "Success",
		"stale":           "Success",
		"garbled-fitness": "Success",
		"no-fitness":      "Success",
		"peer-silent":     "Success",
		"no-samples":      "Success",
		"not-eligible":    refused + "not voter-eligible",
		"unprovisioned":   refused + "not provisioned",
		"pinned":          refused + "pinned",
		"unpinned":        "Success",
		"not-ready":       refused + "not ready",
		"voter-1":         refused + "already an etcd member",
		"learner-1":       refused + "already an etcd member",
		"etcd-labelled":   refused + "already an etcd member",
		"tomb-this":       refused + "carries a tombstone of this cluster",
		"tomb-other":      "Success",
		"tomb-garbled":    refused + "carries a tombstone of this cluster",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Filter per node (-want +got):\n%s", diff)
	}
}

// TestFilterRefusalsAreCountedByReasonCode: each node Filter refuses
// raises holdfast_scheduler_filter_refusals_total{plugin="VoterEligibility"}
// under its refusal's short code, in the registry kube-scheduler serves;
// nodes it admits raise nothing.
func TestFilterRefusalsAreCountedByReasonCode(t *testing.T) {
	codes := []string{"not_voter_eligible", "pinned", "not_provisioned", "not_ready", "etcd_member", "tombstone"}
	count := func() map[string]float64 {
		out := map[string]float64{}
		for _, c := range codes {
			v, err := testutil.GetCounterMetricValue(pluginmetrics.FilterRefusals.WithLabelValues(Name, c))
			if err != nil {
				t.Fatal(err)
			}
			out[c] = v
		}
		return out
	}
	pluginmetrics.Register()
	before := count()
	filterAll(t, plugintest.MakePolicy(cluster, "voter-1").Learners("learner-1").Obj())
	after := count()
	got := map[string]float64{}
	for _, c := range codes {
		got[c] = after[c] - before[c]
	}
	// TestFilter's refusals: voter-1, learner-1 and etcd-labelled are
	// members; tomb-this and tomb-garbled carry a tombstone.
	want := map[string]float64{"not_voter_eligible": 1, "pinned": 1, "not_provisioned": 1, "not_ready": 1, "etcd_member": 3, "tombstone": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refusals counted by reason code (-want +got):\n%s", diff)
	}
	gathered, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gathered {
		if f.GetName() != "holdfast_scheduler_filter_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "" {
					t.Errorf("a refusal counted without a reason code: %v", m)
				}
			}
		}
		return
	}
	t.Error("holdfast_scheduler_filter_refusals_total is not served from kube-scheduler's registry")
}

// TestTombstonedNodeIsNeverACandidate: a removed member never comes back as
// a server (docs/design.md §6): a tombstone of this cluster bars the node, and while
// the cluster ID is not yet known every tombstone does.
func TestTombstonedNodeIsNeverACandidate(t *testing.T) {
	for _, tc := range []struct {
		clusterID string
		want      map[string]string
	}{
		{cluster, map[string]string{"tomb-this": refused + RefusalTombstone, "tomb-other": "Success", "tomb-garbled": refused + RefusalTombstone}},
		{"", map[string]string{"tomb-this": refused + RefusalTombstone, "tomb-other": refused + RefusalTombstone, "tomb-garbled": refused + RefusalTombstone}},
	} {
		got := filterAll(t, plugintest.MakePolicy(tc.clusterID).Obj())
		for node, want := range tc.want {
			if got[node] != want {
				t.Errorf("cluster ID %q: %s = %q, want %q", tc.clusterID, node, got[node], want)
			}
		}
	}
}

func TestScorePrefersTheFittest(t *testing.T) {
	pl, fh := build(t, plugintest.MakePolicy(cluster).Obj())
	state := framework.NewCycleState()
	pod := candidate()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := pl.PreScore(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	var scores fwk.NodeScoreList
	for _, name := range []string{"fit-1", "fit-2", "fit-3", "stale", "garbled-fitness", "no-fitness", "peer-silent", "no-samples"} {
		s, status := pl.Score(context.Background(), state, pod, plugintest.NodeInfo(t, fh, name))
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		scores = append(scores, fwk.NodeScore{Name: name, Score: s})
	}
	if status := pl.NormalizeScore(context.Background(), state, pod, scores); !status.IsSuccess() {
		t.Fatal(status)
	}
	got := map[string]int64{}
	for _, s := range scores {
		got[s.Name] = s.Score
	}
	// Costs (mean of fsync/10ms and worst RTT/50ms): fit-1 0.15, fit-3 0.5,
	// fit-2 0.8; the fittest maps to 100, the least fit to 1.
	want := map[string]int64{
		"fit-1": 100, "fit-3": 1 + (800-500)*99/(800-150), "fit-2": 1,
		"stale": 0, "garbled-fitness": 0, "no-fitness": 0, "peer-silent": 0, "no-samples": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("normalised scores (-want +got):\n%s", diff)
	}
}

func TestPreScoreSkipsOtherPods(t *testing.T) {
	pl, _ := build(t, plugintest.MakePolicy(cluster).Obj())
	state := framework.NewCycleState()
	pod := plugintest.RuntimePod("plant", "boiler-1", 1).Obj()
	pl.PreFilter(context.Background(), state, pod, nil)
	if status := pl.PreScore(context.Background(), state, pod, nil); !status.IsSkip() {
		t.Errorf("PreScore = %v, want Skip", status)
	}
}

func TestBadArgsRefuseToStart(t *testing.T) {
	_, err := getArgs(&config.VoterEligibilityArgs{VoterPolicyName: "", FsyncWeight: 0, PeerRTTWeight: -2})
	want := `[pluginConfig[VoterEligibility].args.voterPolicyName: Required value: must name the VoterPolicy, pluginConfig[VoterEligibility].args.peerRTTWeight: Invalid value: -2: must be between 0 and 100]`
	if err == nil || err.Error() != want {
		t.Errorf("getArgs error = %v, want %s", err, want)
	}
}

func TestSignPodBatchesOnlyPodsThatAreNotCandidates(t *testing.T) {
	pl, _ := build(t)
	if fragments, status := pl.SignPod(context.Background(), st.MakePod().Name("web").Obj()); !status.IsSuccess() || len(fragments) != 0 {
		t.Errorf("SignPod(ordinary pod) = %v, %v; want no fragments and Success", fragments, status)
	}
	if _, status := pl.SignPod(context.Background(), candidate()); status.Code() != fwk.Unschedulable {
		t.Errorf("SignPod(candidate) = %v, want Unschedulable", status)
	}
}

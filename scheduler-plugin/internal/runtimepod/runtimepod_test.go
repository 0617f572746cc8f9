package runtimepod

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

// activations records what the scheduling queue is asked to activate.
type activations struct {
	mu    sync.Mutex
	calls [][]string
}

func (a *activations) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, sets.List(sets.KeySet(pods)))
}

func (a *activations) get() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]string(nil), a.calls...)
}

// TestIndexNodesRequeuesPendingRuntimePodsWhenANodeIsRelabelled: once the
// node index holds a node's new labels, every unbound runtime pod is
// activated (a pod refused while the index lagged would otherwise wait for
// an event that already happened); a status update requeues nothing.
func TestIndexNodesRequeuesPendingRuntimePodsWhenANodeIsRelabelled(t *testing.T) {
	ns := plugintest.Namespace
	cs := clientsetfake.NewClientset(
		plugintest.ReadyNode("standby-1").Label("rack", "a").Obj(),
		plugintest.RuntimePod(ns, "boiler-1", 2).Obj(),
		plugintest.RuntimePod(ns, "mixer-2", 5).Obj(),
		plugintest.RuntimePod(ns, "press-3", 1).Node("standby-1").Obj(), // bound
		st.MakePod().Namespace(ns).Name("workload").Obj(),               // not a runtime
	)
	queue := &activations{}
	fh := plugintest.InformerHandle(t, cs, queue)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	index, err := IndexNodes(ctx, fh)
	if err != nil {
		t.Fatal(err)
	}
	fh.SharedInformerFactory().Start(ctx.Done())
	fh.SharedInformerFactory().WaitForCacheSync(ctx.Done())
	plugintest.Poll(t, "the index's initial list", index.Synced)

	node, err := cs.CoreV1().Nodes().Get(ctx, "standby-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if node, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Labels["pool"] = "spare"
	if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plugintest.Poll(t, "the relabelling's requeue", func() bool { return len(queue.get()) > 0 })

	if !index.Matching(map[string]string{"pool": "spare"}).Has("standby-1") {
		t.Error("activated before the index held the new label")
	}
	// The handler sees the status update first: had it requeued, that call
	// would come first.
	want := [][]string{{ns + "/boiler-1-runtime-e2", ns + "/mixer-2-runtime-e5"}}
	if diff := cmp.Diff(want, queue.get()); diff != "" {
		t.Errorf("activations (-want +got):\n%s", diff)
	}
}

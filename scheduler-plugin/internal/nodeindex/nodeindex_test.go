package nodeindex

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

func node(name string, kv ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

// event is one informer notification.
type event func(h *handler)

func add(n *corev1.Node) event     { return func(h *handler) { h.OnAdd(n, false) } }
func initial(n *corev1.Node) event { return func(h *handler) { h.OnAdd(n, true) } }
func update(old, n *corev1.Node) event {
	return func(h *handler) { h.OnUpdate(old, n) }
}
func remove(obj any) event { return func(h *handler) { h.OnDelete(obj) } }

// The plant the candidate queries run on: two racks, spares in a pool.
func plant() []event {
	return []event{
		initial(node("a-1", "rack", "a", "device", "boiler-1")),
		initial(node("a-2", "rack", "a", "device", "boiler-1", "pool", "spare")),
		initial(node("b-1", "rack", "b", "pool", "spare")),
		initial(node("b-2", "rack", "b", "pool", "hot")),
		initial(node("c-1")),
	}
}

func TestIndexFollowsTheInformer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []event
		set    map[string]string
		want   []string
		// changes is how many times the owner is told to requeue.
		changes int
	}{
		{name: "the initial list does not requeue", events: plant(), set: map[string]string{"rack": "a"},
			want: []string{"a-1", "a-2"}},
		{name: "a node added later requeues", events: append(plant(), add(node("a-3", "rack", "a"))), set: map[string]string{"rack": "a"},
			want: []string{"a-1", "a-2", "a-3"}, changes: 1},
		{name: "a relabelled node moves", events: append(plant(), update(node("b-1", "rack", "b", "pool", "spare"), node("b-1", "rack", "a"))),
			set: map[string]string{"rack": "a"}, want: []string{"a-1", "a-2", "b-1"}, changes: 1},
		{name: "a relabelled node leaves its old value", events: append(plant(), update(node("b-1", "rack", "b", "pool", "spare"), node("b-1", "rack", "a"))),
			set: map[string]string{"pool": "spare"}, want: []string{"a-2"}, changes: 1},
		{name: "an update without a label change is a no-op", events: append(plant(), update(node("b-1", "rack", "b", "pool", "spare"), node("b-1", "rack", "b", "pool", "spare"))),
			set: map[string]string{"pool": "spare"}, want: []string{"a-2", "b-1"}},
		{name: "a delete forgets the node", events: append(plant(), remove(node("a-1", "rack", "a"))), set: map[string]string{"rack": "a"},
			want: []string{"a-2"}, changes: 1},
		{name: "a tombstone forgets the node", events: append(plant(), remove(cache.DeletedFinalStateUnknown{Key: "a-2", Obj: node("a-2", "rack", "a")})),
			set: map[string]string{"rack": "a"}, want: []string{"a-1"}, changes: 1},
		{name: "a delete of an unknown node is a no-op", events: append(plant(), remove(node("z-9"))), set: map[string]string{"rack": "a"},
			want: []string{"a-1", "a-2"}},
		{name: "every label of the set", events: plant(), set: map[string]string{"rack": "a", "pool": "spare"}, want: []string{"a-2"}},
		{name: "a value no node carries", events: plant(), set: map[string]string{"rack": "z"}, want: []string{}},
		{name: "the empty set is every node", events: plant(), set: map[string]string{}, want: []string{"a-1", "a-2", "b-1", "b-2", "c-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := 0
			h := &handler{ix: New(), changed: func() { changes++ }}
			for _, e := range tc.events {
				e(h)
			}
			if diff := cmp.Diff(tc.want, sets.List(h.ix.Matching(tc.set))); diff != "" {
				t.Errorf("Matching(%v) (-want +got):\n%s", tc.set, diff)
			}
			if changes != tc.changes {
				t.Errorf("changed called %d times, want %d", changes, tc.changes)
			}
		})
	}
}

func TestSelecting(t *testing.T) {
	h := &handler{ix: New(), changed: func() {}}
	for _, e := range plant() {
		e(h)
	}
	for _, tc := range []struct {
		name     string
		selector *metav1.LabelSelector
		want     []string
		fallback bool
	}{
		{name: "matchLabels", selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "spare"}}, want: []string{"a-2", "b-1"}},
		{name: "In: the union over values", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"spare", "hot"}}}}, want: []string{"a-2", "b-1", "b-2"}},
		{name: "Exists: every node with the key", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "rack", Operator: metav1.LabelSelectorOpExists}}}, want: []string{"a-1", "a-2", "b-1", "b-2"}},
		{name: "Exists of a key no node carries", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpExists}}}, want: []string{}},
		{name: "the intersection over requirements", selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"rack": "b"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"spare", "hot"}}}}, want: []string{"b-1", "b-2"}},
		{name: "NotIn beside In: a superset, the caller's match narrows", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"spare"}},
			{Key: "rack", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}, want: []string{"a-2", "b-1"}},
		{name: "only NotIn: every node must be judged", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "rack", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}, fallback: true},
		{name: "only DoesNotExist: every node must be judged", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "pool", Operator: metav1.LabelSelectorOpDoesNotExist}}}, fallback: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := metav1.LabelSelectorAsSelector(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := h.ix.Selecting(sel)
			if ok == tc.fallback {
				t.Fatalf("Selecting(%s) ok = %v, want %v", sel, ok, !tc.fallback)
			}
			if tc.fallback {
				return
			}
			if diff := cmp.Diff(tc.want, sets.List(got)); diff != "" {
				t.Errorf("Selecting(%s) (-want +got):\n%s", sel, diff)
			}
			// Never fewer than the selector selects: the index narrows, it
			// never admits or drops.
			for _, n := range []string{"a-1", "a-2", "b-1", "b-2", "c-1"} {
				if sel.Matches(labels.Set(h.ix.labels[n])) && !got.Has(n) {
					t.Errorf("Selecting(%s) left out %s, which it selects", sel, n)
				}
			}
		})
	}
}

// TestWatchFollowsANodeInformer: the index fed from a real informer (over a
// fake clientset) is synced once the initial list is in, follows a
// relabelling, and requeues for it but not for a status update.
func TestWatchFollowsANodeInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := clientsetfake.NewClientset(node("a-1", "rack", "a"), node("b-1", "rack", "b"))
	factory := informers.NewSharedInformerFactory(cs, 0)
	ix := New()
	var changes atomic.Int32
	if err := ix.Watch(factory.Core().V1().Nodes().Informer(), func() { changes.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if ix.Synced() {
		t.Fatal("Synced before the informer started")
	}
	factory.Start(ctx.Done())
	plugintest.Poll(t, "the initial list", func() bool { return ix.Synced() })
	if got := sets.List(ix.Matching(map[string]string{"rack": "a"})); !cmp.Equal(got, []string{"a-1"}) {
		t.Fatalf("rack=a after the initial list = %v, want [a-1]", got)
	}

	n, err := cs.CoreV1().Nodes().Get(ctx, "b-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Labels["rack"] = "a"
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plugintest.Poll(t, "the relabelling", func() bool { return ix.Matching(map[string]string{"rack": "a"}).Has("b-1") })
	if got := changes.Load(); got != 1 {
		t.Errorf("changed called %d times, want once: for the relabelling, not for the initial list or the status update", got)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, "a-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	plugintest.Poll(t, "the delete", func() bool { return !ix.Matching(map[string]string{"rack": "a"}).Has("a-1") })
	plugintest.Poll(t, "the delete's requeue", func() bool { return changes.Load() == 2 })
}

// Package nodeindex indexes the cluster's nodes by label, so that
// UnitPlacement's PreFilter judges the few nodes a unit's rules can consider
// (its primaries, its failover targets) instead of every node of a large
// cluster. The index only narrows: each name it gives is judged again on
// the scheduling cycle's snapshot by the same rules as before.
//
// The index is fed by its own handler on the scheduler's Node informer, and
// the scheduler's own Node handler may run before it: a runtime pod requeued
// by a node's new label can be retried while the index still holds the old
// labels, be refused, and then wait for an event that has already happened.
// So the handler, once it has applied a label change (or a node's add or
// delete), calls back its owner, which activates the pending runtime pods.
// The other order needs nothing: a retry before the scheduler's cache holds
// the change is refused on the snapshot, and the scheduler's own Node event
// requeues the pod again.
package nodeindex

import (
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
)

// Index maps label key -> value -> names of the nodes carrying it.
type Index struct {
	mu      sync.RWMutex
	byLabel map[string]map[string]sets.Set[string]
	// labels are each node's labels as indexed, to undo them on a change.
	labels map[string]map[string]string
	synced func() bool
}

// New is an empty index; Add fills it, or Watch from an informer.
func New() *Index {
	return &Index{
		byLabel: map[string]map[string]sets.Set[string]{},
		labels:  map[string]map[string]string{},
		synced:  func() bool { return true },
	}
}

// Watch feeds the index from informer (the scheduler's Node informer; add
// the handler before the informers start) and calls changed after every
// node added, deleted or relabelled once the index holds the change. The
// nodes of the informer's initial list do not call changed: until they are
// all indexed, Synced is false and the caller judges every node.
func (ix *Index) Watch(informer cache.SharedIndexInformer, changed func()) error {
	reg, err := informer.AddEventHandler(&handler{ix: ix, changed: changed})
	if err != nil {
		return err
	}
	ix.mu.Lock()
	ix.synced = reg.HasSynced
	ix.mu.Unlock()
	return nil
}

// Synced is true once the index holds every node of the informer's initial
// list.
func (ix *Index) Synced() bool {
	ix.mu.RLock()
	synced := ix.synced
	ix.mu.RUnlock()
	return synced()
}

// handler applies the informer's events to the index.
type handler struct {
	ix      *Index
	changed func()
}

func (h *handler) OnAdd(obj any, isInInitialList bool) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if h.ix.Add(node) && !isInInitialList {
		h.changed()
	}
}

func (h *handler) OnUpdate(oldObj, newObj any) {
	old, ok := oldObj.(*corev1.Node)
	node, ok2 := newObj.(*corev1.Node)
	if !ok || !ok2 {
		return
	}
	// Node status updates are frequent, label changes rare.
	if maps.Equal(old.Labels, node.Labels) {
		return
	}
	if h.ix.Add(node) {
		h.changed()
	}
}

func (h *handler) OnDelete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if h.ix.Delete(node.Name) {
		h.changed()
	}
}

// Add indexes node under its current labels, replacing what was indexed for
// it; it reports whether anything changed.
func (ix *Index) Add(node *corev1.Node) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, known := ix.labels[node.Name]
	if known && maps.Equal(old, node.Labels) {
		return false
	}
	ix.unindex(node.Name, old)
	indexed := maps.Clone(node.Labels)
	if indexed == nil {
		indexed = map[string]string{}
	}
	ix.labels[node.Name] = indexed
	for k, v := range indexed {
		values, ok := ix.byLabel[k]
		if !ok {
			values = map[string]sets.Set[string]{}
			ix.byLabel[k] = values
		}
		names, ok := values[v]
		if !ok {
			names = sets.New[string]()
			values[v] = names
		}
		names.Insert(node.Name)
	}
	return true
}

// Delete forgets node name; it reports whether the index held it.
func (ix *Index) Delete(name string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, known := ix.labels[name]
	if !known {
		return false
	}
	ix.unindex(name, old)
	delete(ix.labels, name)
	return true
}

func (ix *Index) unindex(name string, old map[string]string) {
	for k, v := range old {
		names := ix.byLabel[k][v]
		names.Delete(name)
		// Emptied sets go, so that a key no node carries any more costs
		// nothing and Exists does not see it.
		if names.Len() == 0 {
			delete(ix.byLabel[k], v)
			if len(ix.byLabel[k]) == 0 {
				delete(ix.byLabel, k)
			}
		}
	}
}

// Matching names the nodes that carry every label of set (every node for
// an empty set).
func (ix *Index) Matching(set map[string]string) sets.Set[string] {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if len(set) == 0 {
		return sets.KeySet(ix.labels)
	}
	groups := make([][]sets.Set[string], 0, len(set))
	for k, v := range set {
		groups = append(groups, []sets.Set[string]{ix.byLabel[k][v]})
	}
	return intersect(groups)
}

// Selecting names a superset of the nodes sel selects, from its Equals, In
// and Exists requirements; the others (NotIn, DoesNotExist, Gt, Lt) only
// narrow further and are left to the caller's own match. ok is false when
// sel has no requirement the index can serve: the caller must judge every
// node.
func (ix *Index) Selecting(sel labels.Selector) (names sets.Set[string], ok bool) {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return sets.New[string](), true // labels.Nothing
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var groups [][]sets.Set[string]
	for _, r := range reqs {
		var group []sets.Set[string]
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			for _, v := range r.ValuesUnsorted() {
				group = append(group, ix.byLabel[r.Key()][v])
			}
		case selection.Exists:
			// Every node with the key: the union of its values.
			for _, names := range ix.byLabel[r.Key()] {
				group = append(group, names)
			}
		default:
			continue
		}
		groups = append(groups, group)
	}
	if len(groups) == 0 {
		return nil, false
	}
	return intersect(groups), true
}

// intersect is the intersection over groups of the union within each:
// the smallest union first, each of its names kept when every other group
// holds it.
func intersect(groups [][]sets.Set[string]) sets.Set[string] {
	unions := make([]sets.Set[string], len(groups))
	smallest := 0
	for i, group := range groups {
		if len(group) == 1 {
			unions[i] = group[0] // read only
		} else {
			u := sets.New[string]()
			for _, names := range group {
				for name := range names {
					u.Insert(name)
				}
			}
			unions[i] = u
		}
		if unions[i].Len() < unions[smallest].Len() {
			smallest = i
		}
	}
	out := sets.New[string]()
	for name := range unions[smallest] {
		in := true
		for i, u := range unions {
			if i != smallest && !u.Has(name) {
				in = false
				break
			}
		}
		if in {
			out.Insert(name)
		}
	}
	return out
}

// Package requeue puts pods a holdfast plugin refused back in the scheduling
// queue when the holdfast object they wait on changes.
//
// The plugins read Units and the VoterPolicy from their own informers. Were
// the scheduler's dynamic informers to requeue the pods instead, a pod could
// be retried before the plugin's informer had seen the change, be refused on
// the old object, and wait for a change that has already happened. So each
// plugin activates the waiting pods from its own informer's handler, which
// runs after that informer holds the new object.
package requeue

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Activator moves the unbound pods that wait on a changed object back to
// the active queue.
type Activator struct {
	index     string
	pods      cache.Indexer
	activator fwk.PodActivator
}

// New is an Activator over the scheduler's pod informer and queue that
// finds the pods waiting on an object by key: key(pod) names the object a
// pod waits on (ok false for a pod that waits on none). The key is an index
// of that informer, added before it starts (from a plugin's New), so that
// a change costs a lookup of the pods that wait on it, not a scan of every
// pod (a Unit changes at least once per binding, when Bind records it).
// Plugins that share an index name share the index.
func New(h fwk.Handle, index string, key func(*corev1.Pod) (string, bool)) (*Activator, error) {
	informer := h.SharedInformerFactory().Core().V1().Pods().Informer()
	if _, ok := informer.GetIndexer().GetIndexers()[index]; !ok {
		err := informer.AddIndexers(cache.Indexers{index: func(obj any) ([]string, error) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return nil, nil
			}
			if k, ok := key(pod); ok {
				return []string{k}, nil
			}
			return nil, nil
		}})
		if err != nil {
			return nil, fmt.Errorf("indexing pods by %s: %w", index, err)
		}
	}
	return &Activator{index: index, pods: informer.GetIndexer(), activator: h}, nil
}

// Activate requeues the unbound pods whose key is key. A pod in a
// scheduling cycle right now is retried when that cycle ends.
func (a *Activator) Activate(logger klog.Logger, key string) {
	pending := map[string]*corev1.Pod{}
	if err := a.addPending(pending, key); err != nil {
		logger.Error(err, "Listing pods to requeue", "index", a.index, "key", key)
		return
	}
	a.activate(logger, pending, "key", key)
}

// ActivateAll requeues the unbound pods of every key: for a change that
// any of them may wait on (a node relabelled), rare enough that finding
// which ones is not worth it.
func (a *Activator) ActivateAll(logger klog.Logger) {
	pending := map[string]*corev1.Pod{}
	for _, key := range a.pods.ListIndexFuncValues(a.index) {
		if err := a.addPending(pending, key); err != nil {
			logger.Error(err, "Listing pods to requeue", "index", a.index, "key", key)
			return
		}
	}
	a.activate(logger, pending)
}

func (a *Activator) addPending(pending map[string]*corev1.Pod, key string) error {
	objs, err := a.pods.ByIndex(a.index, key)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == "" {
			pending[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	return nil
}

func (a *Activator) activate(logger klog.Logger, pending map[string]*corev1.Pod, keysAndValues ...any) {
	if len(pending) == 0 {
		return
	}
	logger.V(4).Info("Requeueing pods after a holdfast object changed", append([]any{"pods", len(pending), "index", a.index}, keysAndValues...)...)
	a.activator.Activate(logger, pending)
}

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
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Activator moves the unbound pods that wait on a changed object back to
// the active queue.
type Activator struct {
	pods      corelisters.PodLister
	activator fwk.PodActivator
}

// New is an Activator over the scheduler's pod informer and queue. It
// indexes that informer by namespace (before it starts, from a plugin's
// New), so that finding a unit's pods does not scan every pod.
func New(h fwk.Handle) (*Activator, error) {
	pods := h.SharedInformerFactory().Core().V1().Pods()
	informer := pods.Informer()
	if _, ok := informer.GetIndexer().GetIndexers()[cache.NamespaceIndex]; !ok {
		if err := informer.AddIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}); err != nil {
			return nil, fmt.Errorf("indexing pods by namespace: %w", err)
		}
	}
	return &Activator{pods: pods.Lister(), activator: h}, nil
}

// Activate requeues the unbound pods in namespace (all namespaces when
// empty) that selector matches. A pod in a scheduling cycle right now is
// retried when that cycle ends.
func (a *Activator) Activate(logger klog.Logger, namespace string, selector labels.Selector) {
	pods, err := a.pods.Pods(namespace).List(selector)
	if err != nil {
		logger.Error(err, "Listing pods to requeue", "namespace", namespace, "selector", selector.String())
		return
	}
	pending := map[string]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" {
			pending[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(pending) == 0 {
		return
	}
	logger.V(4).Info("Requeueing pods after a holdfast object changed", "pods", len(pending), "namespace", namespace, "selector", selector.String())
	a.activator.Activate(logger, pending)
}

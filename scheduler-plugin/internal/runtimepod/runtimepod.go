// Package runtimepod holds what UnitPlacement and StandbyColocation both
// know about unit runtime pods: which unit a pod belongs to, how to name it
// to a person, and how to requeue a unit's waiting pods when it changes (and
// every waiting runtime pod when a node's labels do).
package runtimepod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/holdfastclient"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/nodeindex"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/pluginmetrics"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/requeue"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/signature"
)

// Display names a unit as a person reading the pod's events knows it: by
// name in the pod's own namespace, namespace/name elsewhere.
func Display(unit types.NamespacedName, fromNamespace string) string {
	if unit.Namespace == fromNamespace {
		return unit.Name
	}
	return unit.String()
}

// Setup is the start of a runtime-pod plugin's New: it reads the plugin's
// args from obj with getArgs, registers the plugins' metrics and reads Units
// through the scheduler's shared holdfast informers, requeueing a unit's
// waiting runtime pods whenever it changes (RequeueOnUnitChange). Its errors
// carry the plugin's name.
func Setup[A any](ctx context.Context, h fwk.Handle, obj runtime.Object, plugin string, getArgs func(runtime.Object) (A, error)) (A, *holdfastclient.Clients, error) {
	args, err := getArgs(obj)
	if err != nil {
		return args, nil, err
	}
	pluginmetrics.Register()
	clients, err := holdfastclient.For(ctx, h, &holdfastv1.Unit{})
	if err != nil {
		return args, nil, fmt.Errorf("%s: %w", plugin, err)
	}
	if err := RequeueOnUnitChange(ctx, h, clients); err != nil {
		return args, nil, fmt.Errorf("%s: %w", plugin, err)
	}
	return args, clients, nil
}

// SignPod refuses a runtime pod a signature: its result depends on its own
// unit and the runtimes around it, and is never reused.
func SignPod(pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	_, ok := policy.RuntimeUnit(pod)
	return signature.Alone(ok, "a unit runtime pod")
}

// RequeueOnUnitChange activates a unit's unbound runtime pods whenever the
// Unit changes (a new epoch authorised, targets edited, the ledger emptied),
// from the informer the plugins read, so the retry sees the change.
func RequeueOnUnitChange(ctx context.Context, h fwk.Handle, clients *holdfastclient.Clients) error {
	logger := klog.FromContext(ctx)
	activator, err := Activator(h)
	if err != nil {
		return err
	}
	return clients.OnChange(ctx, &holdfastv1.Unit{}, func(u client.Object) {
		activator.Activate(logger, client.ObjectKeyFromObject(u).String())
	})
}

// IndexNodes indexes the scheduler's nodes by label (from its Node
// informer; call it from a plugin's New) and activates every unbound runtime
// pod after a node is added, deleted or relabelled, once the index holds the
// change: a pod refused while the index lagged the scheduler's own requeue
// would otherwise wait for an event that has already happened (package
// nodeindex).
func IndexNodes(ctx context.Context, h fwk.Handle) (*nodeindex.Index, error) {
	activator, err := Activator(h)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	nodes := nodeindex.New()
	if err := nodes.Watch(h.SharedInformerFactory().Core().V1().Nodes().Informer(), func() { activator.ActivateAll(logger) }); err != nil {
		return nil, fmt.Errorf("indexing nodes: %w", err)
	}
	return nodes, nil
}

// Activator requeues runtime pods found by their unit, through an index of
// the scheduler's pod informer (call it from a plugin's New).
func Activator(h fwk.Handle) (*requeue.Activator, error) {
	return requeue.New(h, holdfastv1.LabelUnit, func(pod *corev1.Pod) (string, bool) {
		key, ok := policy.RuntimeUnit(pod)
		return key.String(), ok
	})
}

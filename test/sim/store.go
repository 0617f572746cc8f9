package sim

import (
	"context"
	"fmt"
	"reflect"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// store is a set of objects of the kinds the lease's parts read (Units,
// Pods, Nodes): the apiserver's own, or a process's informer cache of it.
type store struct {
	objs map[string]client.Object
}

func newStore() *store { return &store{objs: map[string]client.Object{}} }

func kindOf(obj any) string {
	switch obj.(type) {
	case *holdfastv1.Unit, *holdfastv1.UnitList:
		return "Unit"
	case *corev1.Pod, *corev1.PodList:
		return "Pod"
	case *corev1.Node, *corev1.NodeList:
		return "Node"
	case *coordinationv1.Lease:
		return "Lease"
	}
	panic(fmt.Sprintf("sim: no kind %T in the simulated apiserver", obj))
}

var resources = map[string]schema.GroupResource{
	"Unit": {Group: holdfastv1.GroupVersion.Group, Resource: "units"},
	"Pod":  {Resource: "pods"},
	"Node": {Resource: "nodes"},
	// The cluster's epoch record (controller/units.EpochRecord), read past
	// every cache.
	"Lease": {Group: coordinationv1.GroupName, Resource: "leases"},
}

// watched: the informers the simulated processes run watch Units, Pods and
// Nodes; a Lease is read only past the cache.
func watched(obj client.Object) bool { return kindOf(obj) != "Lease" }

func keyOf(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func objKey(obj client.Object) string { return keyOf(kindOf(obj), obj.GetNamespace(), obj.GetName()) }

func (st *store) get(kind, ns, name string) (client.Object, bool) {
	o, ok := st.objs[keyOf(kind, ns, name)]
	return o, ok
}

func (st *store) put(obj client.Object) { st.objs[objKey(obj)] = obj }

func (st *store) remove(obj client.Object) { delete(st.objs, objKey(obj)) }

// sorted lists the objects of kind in ns ("" every namespace) matching sel,
// by namespace and name.
func (st *store) sorted(kind, ns string, sel labels.Selector) []client.Object {
	var keys []string
	for k, o := range st.objs {
		if kindOf(o) != kind || (ns != "" && o.GetNamespace() != ns) {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]client.Object, len(keys))
	for i, k := range keys {
		out[i] = st.objs[k]
	}
	return out
}

// into copies src into dst, both pointers to the same type.
func into(dst, src client.Object) {
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
}

func notFound(kind, name string) error { return apierrors.NewNotFound(resources[kind], name) }

// read answers a Get from st.
func (st *store) read(key client.ObjectKey, obj client.Object) error {
	kind := kindOf(obj)
	o, ok := st.get(kind, key.Namespace, key.Name)
	if !ok {
		return notFound(kind, key.Name)
	}
	into(obj, o)
	return nil
}

// readList answers a List from st.
func (st *store) readList(list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	objs := st.sorted(kindOf(list), lo.Namespace, lo.LabelSelector)
	switch l := list.(type) {
	case *holdfastv1.UnitList:
		l.Items = make([]holdfastv1.Unit, len(objs))
		for i, o := range objs {
			l.Items[i] = *o.DeepCopyObject().(*holdfastv1.Unit)
		}
	case *corev1.PodList:
		l.Items = make([]corev1.Pod, len(objs))
		for i, o := range objs {
			l.Items[i] = *o.DeepCopyObject().(*corev1.Pod)
		}
	case *corev1.NodeList:
		l.Items = make([]corev1.Node, len(objs))
		for i, o := range objs {
			l.Items[i] = *o.DeepCopyObject().(*corev1.Node)
		}
	}
	return nil
}

// storeReader reads a store at once: the apiserver's own reads (the
// webhook's, the scheduler's) and a process's informer cache.
type storeReader struct{ st *store }

var _ client.Reader = storeReader{}

func (r storeReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return r.st.read(key, obj)
}

func (r storeReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.st.readList(list, opts...)
}

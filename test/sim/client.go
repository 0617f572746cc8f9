package sim

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// taskClient is a controller-runtime client for code that runs as a task
// (a reconcile pass): reads from the process's informer cache at once,
// writes carried to the apiserver and back over the network, the task
// parked until the answer or the timeout.
type taskClient struct {
	client.Client // not used by the simulated code
	s             *Sim
	p             *proc
	t             *task
	cache         *cache
	u             user
}

var _ client.Client = (*taskClient)(nil)

func (c *taskClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.cache.reader().Get(ctx, key, obj, opts...)
}

func (c *taskClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.cache.reader().List(ctx, list, opts...)
}

// answer copies the apiserver's answer into obj, as a client does.
func answerInto(obj client.Object, r apiResult) error {
	if r.err == nil && r.obj != nil {
		into(obj, r.obj)
	}
	return r.err
}

func (c *taskClient) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	sent := obj.DeepCopyObject().(client.Object)
	return answerInto(obj, c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) { return a.create(c.u, sent) }))
}

func (c *taskClient) Delete(_ context.Context, obj client.Object, _ ...client.DeleteOption) error {
	sent := obj.DeepCopyObject().(client.Object)
	return c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) { return nil, a.remove(sent, false) }).err
}

func (c *taskClient) Update(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
	sent := obj.DeepCopyObject().(client.Object)
	return answerInto(obj, c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) { return a.update(c.u, sent, "") }))
}

func (c *taskClient) Patch(_ context.Context, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	sent := obj.DeepCopyObject().(client.Object)
	return answerInto(obj, c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) { return a.patch(c.u, sent, data) }))
}

func (c *taskClient) Status() client.SubResourceWriter { return statusWriter{c} }

type statusWriter struct{ c *taskClient }

func (w statusWriter) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	panic("sim: status create is not used")
}

func (w statusWriter) Update(_ context.Context, obj client.Object, _ ...client.SubResourceUpdateOption) error {
	c := w.c
	sent := obj.DeepCopyObject().(client.Object)
	return answerInto(obj, c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) { return a.update(c.u, sent, "status") }))
}

func (w statusWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	panic("sim: status patch is not used")
}

func (w statusWriter) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	panic("sim: status apply is not used")
}

// liveReader reads the apiserver itself over the network (a manager's
// APIReader), parking the task.
type liveReader struct{ c *taskClient }

func (r liveReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c := r.c
	kind := kindOf(obj)
	return answerInto(obj, c.s.callTask(c.p, c.t, func(a *apiserver) (client.Object, error) {
		o, ok := a.st.get(kind, key.Namespace, key.Name)
		if !ok {
			return nil, notFound(kind, key.Name)
		}
		return o, nil
	}))
}

func (r liveReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("sim: live lists are not used")
}

package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/webhook"
)

// apiTimeout is how long a client waits for an answer before it gives up
// on a request: client-go's HTTP/2 health check of a dead connection (2s
// read-idle, 2s ping), the grantor's and the node plugin's settings.
const apiTimeout = 4 * time.Second

var errTimeout = errors.New("sim: no answer from the apiserver (connection lost)")

// errKilled answers the apiserver calls of a process that died meanwhile.
var errKilled = errors.New("sim: the calling process was killed")

// apiserver is kube-apiserver and its etcd, simulated at their contract:
// resourceVersion conflicts, graceful pod deletion, garbage collection of a
// deleted Unit's pods, watches that break with the network and relist, and
// the real webhook (webhook.Handlers) admitting every Unit write. The
// scheduler and kube-controller-manager's node lifecycle run beside it, on
// its clock (placement.go).
type apiserver struct {
	s      *Sim
	p      *proc
	st     *store
	rv     int64
	uids   int
	scheme *runtime.Scheme
	admit  *admission.Webhook
	opts   *webhook.Options
	caches []*cache
	// heartbeats: when each node's kubelet was last heard, on this clock.
	heartbeats map[string]time.Time
	election   electionRecord
}

// users of the simulated cluster.
type user struct {
	name   string
	groups []string
}

func (a *apiserver) now() time.Time { return a.p.clock().Now() }

func (a *apiserver) init() error {
	a.st = newStore()
	a.heartbeats = map[string]time.Time{}
	a.scheme = webhookScheme()
	opts := webhook.DefaultOptions()
	opts.Audit = discard{}
	opts.Now = a.now
	opts.Grantor = a.s.cfg.Timings
	a.opts = &opts
	a.admit = webhook.Handlers(a.scheme, storeReader{a.st}, a.opts)[webhook.PathUnit]
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func webhookScheme() *runtime.Scheme {
	s, err := webhook.NewScheme()
	if err != nil {
		panic(err)
	}
	return s
}

// admitUnit runs the real webhook on a Unit create or update.
func (a *apiserver) admitUnit(u user, old, obj *holdfastv1.Unit, sub string) error {
	raw := func(x *holdfastv1.Unit) runtime.RawExtension {
		if x == nil {
			return runtime.RawExtension{}
		}
		c := x.DeepCopy()
		c.APIVersion, c.Kind = holdfastv1.GroupVersion.String(), "Unit"
		b, err := json.Marshal(c)
		if err != nil {
			panic(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	op := admissionv1.Create
	if old != nil {
		op = admissionv1.Update
	}
	a.uids++
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         types.UID("admission-" + strconv.Itoa(a.uids)),
		Kind:        metav1.GroupVersionKind{Group: holdfastv1.GroupVersion.Group, Version: holdfastv1.GroupVersion.Version, Kind: "Unit"},
		Resource:    metav1.GroupVersionResource{Group: holdfastv1.GroupVersion.Group, Version: holdfastv1.GroupVersion.Version, Resource: "units"},
		SubResource: sub,
		Name:        obj.Name,
		Namespace:   obj.Namespace,
		Operation:   op,
		UserInfo:    authenticationv1.UserInfo{Username: u.name, Groups: u.groups},
		Object:      raw(obj),
		OldObject:   raw(old),
	}}
	resp := a.admit.Handle(context.Background(), req)
	if resp.Allowed {
		return nil
	}
	st := metav1.Status{Status: metav1.StatusFailure, Message: "admission webhook denied the request", Code: 403}
	if resp.Result != nil {
		st = *resp.Result
	}
	return &apierrors.StatusError{ErrStatus: st}
}

func (a *apiserver) bump(obj client.Object) {
	a.rv++
	obj.SetResourceVersion(strconv.FormatInt(a.rv, 10))
}

// create stores obj as u creates it.
func (a *apiserver) create(u user, obj client.Object) (client.Object, error) {
	kind := kindOf(obj)
	if _, ok := a.st.get(kind, obj.GetNamespace(), obj.GetName()); ok {
		return nil, apierrors.NewAlreadyExists(resources[kind], obj.GetName())
	}
	if obj.GetResourceVersion() != "" {
		return nil, apierrors.NewBadRequest("resourceVersion must not be set on create")
	}
	if unit, ok := obj.(*holdfastv1.Unit); ok {
		if err := a.admitUnit(u, nil, unit, ""); err != nil {
			return nil, err
		}
	}
	c := obj.DeepCopyObject().(client.Object)
	a.uids++
	c.SetUID(types.UID(fmt.Sprintf("%s-uid-%d", kind, a.uids)))
	c.SetCreationTimestamp(metav1.NewTime(a.now().Truncate(time.Second)))
	c.SetGeneration(1)
	a.bump(c)
	a.st.put(c)
	a.commit(c, false)
	return c, nil
}

// update writes obj (sub "status": its status only) if its resourceVersion
// is the stored one.
func (a *apiserver) update(u user, obj client.Object, sub string) (client.Object, error) {
	kind := kindOf(obj)
	cur, ok := a.st.get(kind, obj.GetNamespace(), obj.GetName())
	if !ok {
		return nil, notFound(kind, obj.GetName())
	}
	if obj.GetResourceVersion() != "" && obj.GetResourceVersion() != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(resources[kind], obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	next := a.merge(cur, obj, sub)
	if err := a.admitUpdate(u, cur, next, sub); err != nil {
		return nil, err
	}
	return a.store(next), nil
}

// keepStored is what an update of sub does to stored, of either kind: the
// status subresource changes the status only, the main resource all but it.
func keepStored[T interface{ DeepCopy() T }, S any](stored, next T, sub string, status func(T) *S) T {
	if sub == "status" {
		n := stored.DeepCopy()
		*status(n) = *status(next)
		return n
	}
	*status(next) = *status(stored.DeepCopy())
	return next
}

// merge is what an update of sub does to cur: the main resource keeps the
// stored status, the status subresource keeps everything else.
func (a *apiserver) merge(cur, obj client.Object, sub string) client.Object {
	next := obj.DeepCopyObject().(client.Object)
	switch c := cur.(type) {
	case *holdfastv1.Unit:
		n := keepStored(c, next.(*holdfastv1.Unit), sub, func(u *holdfastv1.Unit) *holdfastv1.UnitStatus { return &u.Status })
		if sub != "status" {
			if !equalSpec(c, n) {
				n.Generation = c.Generation + 1
			} else {
				n.Generation = c.Generation
			}
		}
		next = n
	case *corev1.Pod:
		next = keepStored(c, next.(*corev1.Pod), sub, func(p *corev1.Pod) *corev1.PodStatus { return &p.Status })
	}
	next.SetUID(cur.GetUID())
	next.SetCreationTimestamp(cur.GetCreationTimestamp())
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	return next
}

// admitUpdate is what the apiserver and the webhook say to an update of
// cur to next (sub "status": its status only), whether a put or a patch.
func (a *apiserver) admitUpdate(u user, cur, next client.Object, sub string) error {
	if err := finalizerAdded(cur, next); err != nil {
		return err
	}
	if unit, ok := next.(*holdfastv1.Unit); ok {
		return a.admitUnit(u, cur.(*holdfastv1.Unit), unit, sub)
	}
	return nil
}

// finalizerAdded refuses, as the apiserver does, a new finalizer on an
// object being deleted.
func finalizerAdded(cur, next client.Object) error {
	if cur.GetDeletionTimestamp() == nil {
		return nil
	}
	for _, f := range next.GetFinalizers() {
		if !slices.Contains(cur.GetFinalizers(), f) {
			return apierrors.NewForbidden(resources[kindOf(cur)], cur.GetName(), fmt.Errorf("no new finalizers can be added if the object is being deleted, found new finalizers %q", f))
		}
	}
	return nil
}

func equalSpec(a, b *holdfastv1.Unit) bool {
	x, _ := json.Marshal(a.Spec)
	y, _ := json.Marshal(b.Spec)
	return string(x) == string(y)
}

func (a *apiserver) store(next client.Object) client.Object {
	a.bump(next)
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		if _, ok := next.(*holdfastv1.Unit); ok {
			a.drop(next)
			return next
		}
	}
	a.st.put(next)
	a.commit(next, false)
	return next
}

// patch applies a JSON merge patch to the stored object.
func (a *apiserver) patch(u user, obj client.Object, data []byte) (client.Object, error) {
	kind := kindOf(obj)
	cur, ok := a.st.get(kind, obj.GetNamespace(), obj.GetName())
	if !ok {
		return nil, notFound(kind, obj.GetName())
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(orig, data)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	next := cur.DeepCopyObject().(client.Object)
	reset(next)
	if err := json.Unmarshal(merged, next); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if rv := next.GetResourceVersion(); rv != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(resources[kind], obj.GetName(), fmt.Errorf("resourceVersion %s is not %s", rv, cur.GetResourceVersion()))
	}
	next = a.merge(cur, next, "")
	if err := a.admitUpdate(u, cur, next, ""); err != nil {
		return nil, err
	}
	return a.store(next), nil
}

func reset(obj client.Object) {
	switch o := obj.(type) {
	case *holdfastv1.Unit:
		*o = holdfastv1.Unit{}
	case *corev1.Pod:
		*o = corev1.Pod{}
	case *corev1.Node:
		*o = corev1.Node{}
	case *coordinationv1.Lease:
		*o = coordinationv1.Lease{}
	}
}

// remove deletes obj. A pod on a node is deleted gracefully: it is marked
// and stays until its kubelet confirms (force) that its containers are
// gone. A Unit's pods go with it (the garbage collector).
func (a *apiserver) remove(obj client.Object, force bool) error {
	kind := kindOf(obj)
	cur, ok := a.st.get(kind, obj.GetNamespace(), obj.GetName())
	if !ok {
		return notFound(kind, obj.GetName())
	}
	if uid := obj.GetUID(); uid != "" && uid != cur.GetUID() {
		return apierrors.NewConflict(resources[kind], obj.GetName(), fmt.Errorf("uid precondition"))
	}
	if unit, ok := cur.(*holdfastv1.Unit); ok && len(unit.Finalizers) > 0 {
		// Held by its finalizers: marked, and gone with the last of them.
		if unit.DeletionTimestamp == nil {
			next := unit.DeepCopy()
			t := metav1.NewTime(a.now())
			next.DeletionTimestamp = &t
			a.store(next)
		}
		return nil
	}
	if pod, ok := cur.(*corev1.Pod); ok && pod.Spec.NodeName != "" && !force {
		if pod.DeletionTimestamp == nil {
			next := pod.DeepCopy()
			t := metav1.NewTime(a.now())
			next.DeletionTimestamp = &t
			a.store(next)
		}
		return nil
	}
	a.drop(cur)
	return nil
}

// drop removes obj from the store; a Unit's pods follow (the garbage
// collector).
func (a *apiserver) drop(obj client.Object) {
	a.st.remove(obj)
	a.commit(obj, true)
	if unit, ok := obj.(*holdfastv1.Unit); ok {
		uid := unit.UID
		a.s.after(a.p, 500*time.Millisecond, func() { a.collect(uid) })
	}
}

// collect deletes the pods a deleted Unit owned.
func (a *apiserver) collect(uid types.UID) {
	for _, o := range a.st.sorted("Pod", "", nil) {
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == uid {
				_ = a.remove(o, false)
			}
		}
	}
}

// commit sends a change to every watch.
func (a *apiserver) commit(obj client.Object, deleted bool) {
	if !watched(obj) {
		return
	}
	snap := obj.DeepCopyObject().(client.Object)
	live := a.caches[:0]
	for _, c := range a.caches {
		if c.owner.life != c.life {
			continue
		}
		live = append(live, c)
		c.deliver(func() {
			if deleted {
				c.st.remove(snap)
			} else {
				c.st.put(snap.DeepCopyObject().(client.Object))
			}
			if c.onChange != nil {
				c.onChange(kindOf(snap), snap.GetNamespace(), snap.GetName())
			}
		})
	}
	a.caches = live
	a.s.placementDue(obj, deleted)
}

// watchRequest (re)starts c's watch: a fresh list, then every change.
func (a *apiserver) watchRequest(c *cache) {
	c.gen++
	c.streaming = true
	snap := map[string]client.Object{}
	for k, o := range a.st.objs {
		if watched(o) {
			snap[k] = o.DeepCopyObject().(client.Object)
		}
	}
	c.deliver(func() {
		c.st.objs = snap
		c.synced = true
		if c.onChange != nil {
			c.onChange("", "", "")
		}
	})
}

// apiResult is one answer of the apiserver.
type apiResult struct {
	obj client.Object
	err error
}

// apiOp is a request, carried out at the apiserver when it arrives.
type apiOp func(a *apiserver) (client.Object, error)

// call carries op from a process to the apiserver and its answer back.
// done runs on the caller (when it runs) with the answer, or with
// errTimeout after apiTimeout of the caller's clock without one; a request
// whose answer was lost may have been carried out.
func (s *Sim) call(from *proc, op apiOp, done func(apiResult)) {
	s.callWithin(from, apiTimeout, op, done)
}

// callWithin is call with another timeout.
func (s *Sim) callWithin(from *proc, timeout time.Duration, op apiOp, done func(apiResult)) {
	a := s.api
	finished := false
	finish := func(r apiResult) {
		if finished {
			return
		}
		finished = true
		done(r)
	}
	s.net.send(from.host, a.p.host, controlNet, func() {
		s.soon(a.p, func() {
			obj, err := op(a)
			if obj != nil {
				obj = obj.DeepCopyObject().(client.Object)
			}
			s.net.send(a.p.host, from.host, controlNet, func() {
				s.soon(from, func() { finish(apiResult{obj, err}) })
			})
		})
	})
	s.after(from, timeout, func() { finish(apiResult{err: errTimeout}) })
}

// callTask is call from a task: it parks the task until the answer.
func (s *Sim) callTask(from *proc, t *task, op apiOp) apiResult {
	if t.killed || !from.alive {
		return apiResult{err: errKilled}
	}
	t.pending = true
	s.call(from, op, func(r apiResult) {
		if !t.pending {
			return
		}
		t.pending, t.result = false, r
		s.wait(t)
	})
	t.park()
	return t.result
}

// abort answers a task's pending call with errKilled (its process died)
// and lets it run to its end, every later call failing at once.
func (s *Sim) abort(t *task) {
	if t == nil || t.done {
		return
	}
	t.killed = true
	if t.pending {
		t.pending, t.result = false, apiResult{err: errKilled}
		s.wait(t)
	}
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/poll"
)

// L11/L13 with real runtime processes on the real apiserver and a plain
// device that takes every write: a pod gone from the apiserver is not a
// stopped writer. An Autonomy runtime on a node cut from the control
// network writes on while its Pod object is removed without the kubelet:
// force-deleted as PodGC does once a person deletes the Node, or by
// kubectl delete --force. A deleted Unit keeps its name, and a hand-over
// starts no new epoch, until the node's plugin, back in reach, lists the
// node with no container of it, or a person certifies the stop; the device
// sees one writer at a time.
func TestAPodGoneIsNotAStoppedWriterUntilItsNodeConfirms(t *testing.T) {
	t.Run("a deleted Unit whose Node was deleted", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		dev, p, pod, old := autonomyWriting(t)
		other := p.ns + "-other"
		p.k.node(other, map[string]string{"holdfast.io/device": other})

		p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
		gone := p.unit()
		if err := env.Client.Delete(ctx, gone); err != nil {
			t.Fatal(err)
		}
		awaitHandOver(t, p.key, "Unit deleted")
		// A person deletes the Node; PodGC force-deletes its pods.
		if err := env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.primary}}); err != nil {
			t.Fatal(err)
		}
		forceDelete(t, p.ns, pod)
		podGoneAt := awaitHandOver(t, p.key, fmt.Sprintf("waiting for node %s's plugin to list the node's runtimes", p.primary))
		writesOn(t, dev, 100)
		again := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "kiln"}, Spec: *p.u.Spec.DeepCopy()}
		again.Spec.NodeSelector = map[string]string{"holdfast.io/device": other}
		again.Spec.Runtime.Args = plainArgs(dev, "101")
		if err := env.Client.Create(ctx, again.DeepCopy()); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("the Unit created again while the deleted one's runtime writes: %v", err)
		}

		// The node comes back: its plugin lists the runtime, still running
		// (a pod gone is not a process gone).
		node(t, p.primary, map[string]string{"holdfast.io/device": p.ns})
		p.k.setNode(p.primary, func(n *simNode) { n.cut = false })
		awaitHandOver(t, p.key, fmt.Sprintf("lists its runtime still running there (pod %s uid %s", pod, old.uid))
		writesOn(t, dev, 100)
		if u := getUnit(t, p.key); u == nil || u.UID != gone.UID || !u.Status.RuntimeBinding.HandOver.PodGoneAt.Equal(podGoneAt) {
			t.Fatalf("the deleted Unit %+v, want it held with podGoneAt %v", u, podGoneAt)
		}

		// Stopped on the node: the plugin's next listing releases the name.
		old.kill()
		poll.Until(t, 30*time.Second, "the Unit created again", func() (bool, string) {
			err := env.Client.Create(ctx, again.DeepCopy())
			return err == nil, fmt.Sprintf("create: %v", err)
		})
		e := waitNewEpoch(t, p.key, 0)
		schedule(t, p.key, e, other)
		poll.Until(t, 30*time.Second, "the re-created Unit's runtime writing", func() (bool, string) {
			return len(writesTo(dev, 101)) >= 3, fmt.Sprintf("%d writes", len(writesTo(dev, 101)))
		})
		oneWriterAtATime(t, dev, 100, 101)
		var retired string
		for _, ev := range events(t, gone) {
			if ev.Regarding.UID == gone.UID && ev.Reason == units.EventRetired {
				retired = ev.Note
			}
		}
		if !strings.Contains(retired, fmt.Sprintf("node %s's plugin, listing the node after that, runs no container of it", p.primary)) {
			t.Fatalf("the Retired event says %q", retired)
		}
	})

	t.Run("an Autonomy hand-over after kubectl delete --force", func(t *testing.T) {
		t.Parallel()
		dev, p, pod, old := autonomyWriting(t)

		p.k.setNode(p.primary, func(n *simNode) { n.cut = true })
		p.edit(func(s *holdfastv1.UnitSpec) { s.Runtime.Args = plainArgs(dev, "101") })
		awaitHandOver(t, p.key, "Hand-over of epoch")
		forceDelete(t, p.ns, pod)
		awaitHandOver(t, p.key, fmt.Sprintf("waiting for node %s's plugin to list the node's runtimes", p.primary))
		writesOn(t, dev, 100)
		if b := p.unit().Status.RuntimeBinding; b.Epoch != p.epoch(1) {
			t.Fatalf("epoch %d started while epoch %d writes on", b.Epoch, p.epoch(1))
		}

		// A person stops the runtime on the node and certifies it.
		old.kill()
		annotate(t, p.key, fenceConfirmed(t, p.key, "stopped the runtime on the node by hand", p.epoch(1)))
		p.waitPod(2)
		if u := p.unit(); u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced] != "" {
			// Consumed after the status write; wait for it.
			poll.Until(t, 10*time.Second, "the certification consumed", func() (bool, string) {
				v := p.unit().Annotations[holdfastv1.AnnotationFailoverConfirmFenced]
				return v == "", v
			})
		}
		p.k.setNode(p.primary, func(n *simNode) { n.cut = false })
		schedule(t, p.key, p.epoch(2), p.primary)
		poll.Until(t, 30*time.Second, "the new runtime writing", func() (bool, string) {
			return len(writesTo(dev, 101)) >= 3, fmt.Sprintf("%d writes", len(writesTo(dev, 101)))
		})
		oneWriterAtATime(t, dev, 100, 101)
	})
}

// autonomyWriting is an Autonomy plant on a plain device, its runtime at
// binding 1 on the primary writing to register 100: the device, the
// plant, the runtime's pod and process.
func autonomyWriting(t *testing.T) (*devicesim.Sim, *plant, string, *runtimeProc) {
	t.Helper()
	dev, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", Mode: devicesim.Plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	p := newPlantWith(t, func(u *holdfastv1.Unit) {
		u.Spec.Availability.Mode = holdfastv1.Autonomy
		u.Spec.Runtime.Args = plainArgs(dev, "100")
	}, "standby-1")
	p.place(1)
	poll.Until(t, 30*time.Second, "the runtime writing", func() (bool, string) {
		return len(writesTo(dev, 100)) >= 3, fmt.Sprintf("%d writes", len(writesTo(dev, 100)))
	})
	pod := units.PodName("kiln", p.epoch(1))
	return dev, p, pod, p.k.proc(pod)
}

// awaitHandOver waits for the Unit's RuntimeHandOver condition, True, to
// say want, and returns the binding's podGoneAt then.
func awaitHandOver(t *testing.T, key types.NamespacedName, want string) *metav1.Time {
	t.Helper()
	var at *metav1.Time
	poll.Until(t, 60*time.Second, "RuntimeHandOver saying "+want, func() (bool, string) {
		u := getUnit(t, key)
		if u == nil || u.Status.RuntimeBinding == nil {
			return false, "no binding"
		}
		c := meta.FindStatusCondition(u.Status.Conditions, holdfastv1.ConditionRuntimeHandOver)
		if h := u.Status.RuntimeBinding.HandOver; h != nil {
			at = h.PodGoneAt
		}
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, want), fmt.Sprintf("%+v", c)
	})
	return at
}

// forceDelete removes the pod without its kubelet, as PodGC does for the
// pods of a deleted Node and kubectl delete --force does.
func forceDelete(t *testing.T, ns, pod string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	if err := env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// writesOn waits for three more accepted writes to register: its writer
// still runs.
func writesOn(t *testing.T, dev *devicesim.Sim, register uint16) {
	t.Helper()
	n := len(writesTo(dev, register))
	poll.Until(t, 20*time.Second, "the old runtime writing on", func() (bool, string) {
		return len(writesTo(dev, register)) >= n+3, fmt.Sprintf("%d writes since", len(writesTo(dev, register))-n)
	})
}

// oneWriterAtATime fails when the new writer's first write is not after
// the old one's last.
func oneWriterAtATime(t *testing.T, dev *devicesim.Sim, oldRegister, newRegister uint16) {
	t.Helper()
	olds, news := writesTo(dev, oldRegister), writesTo(dev, newRegister)
	if last, first := olds[len(olds)-1].Time, news[0].Time; !first.After(last) {
		t.Fatalf("two writers: the new runtime first wrote at %v, the old one last wrote at %v", first, last)
	}
}

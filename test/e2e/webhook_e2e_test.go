//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// TestWebhookDownDuringAFailover: holdfast-webhook is taken away (its
// configuration, failurePolicy Fail, stays registered), then the primary's
// node is cut from the control network with its field link open.
//   - What proceeds: the controller's own status writes, which the
//     configuration lets pass without asking the webhook: the expiry, the
//     Hold and the re-bind to epoch 2 are recorded; and the old runtime
//     fences by its own clock.
//   - What blocks: every change the webhook guards. Epoch 2's runtime pod
//     is not created (the apiserver refuses a runtime pod while nobody
//     answers for the webhook), nor a person's failover request on the
//     Unit; both refusals name the webhook.
//   - Nothing unsafe: the device, read by true time and connection, saw one
//     writer throughout.
//
// The webhook back, the failover completes: an epoch after 1 holds on a
// standby (epoch 2, or a later one if epoch 2's start-up grace ran out
// while its pod could not be created), and, healed, the old runtime is
// fenced and stopped.
func TestWebhookDownDuringAFailover(t *testing.T) {
	d := newDrill(t, "webhook-down", 0)
	b1, _ := d.heldPastHoldOff()
	start, err := world.StopWebhook(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	started := false
	startWebhook := func() {
		if !started {
			started = true
			if err := start(d.ctx); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(startWebhook)
	cutAt := time.Now()
	heal := d.partition(world.Nodes[b1.Node], cluster.Control)

	// What proceeds.
	b2, err := d.u.WaitBinding(d.ctx, 2, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d.events(evLeaseEstablished, evLeaseExpired, evHold, evRebound)
	t.Logf("with the webhook down: epoch %d authorised %v after the cut", b2.Epoch, time.Since(cutAt).Round(100*time.Millisecond))

	// What blocks.
	if p, err := d.u.RuntimePod(d.ctx, b2.Epoch); err != nil || p != nil {
		t.Fatalf("epoch %d's runtime pod exists with the webhook down: %v, %v", b2.Epoch, p, err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "webhook") {
			t.Fatalf("%s with the webhook down: %v, want a refusal naming the webhook", what, err)
		}
		t.Logf("%s refused: %v", what, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: d.u.Key.Namespace, Name: holdfastv1.RuntimePodName(d.u.Key.Name, b2.Epoch),
		Labels: map[string]string{holdfastv1.LabelUnit: d.u.Key.Name, holdfastv1.LabelEpoch: strconv.FormatInt(b2.Epoch, 10)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runtime", Image: cluster.PauseImage}}}}
	refused("a runtime pod", world.Client.Create(d.ctx, pod, client.DryRunAll))
	u, err := d.u.Get(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(u.DeepCopy())
	if u.Annotations == nil {
		u.Annotations = map[string]string{}
	}
	u.Annotations[holdfastv1.AnnotationFailoverTo] = world.NodeNames[len(world.NodeNames)-1]
	refused("a failover request", world.Client.Patch(d.ctx, u, patch, client.DryRunAll))
	d.oneWriterSoFar()

	// The webhook back: the failover completes.
	backAt := time.Now()
	startWebhook()
	bn := d.laterEpochHeld(b1.Epoch, 5*time.Minute)
	if bn.Node == b1.Node {
		t.Fatalf("epoch %d bound to the cut node %s", bn.Epoch, bn.Node)
	}
	if err := d.u.WaitWrites(d.ctx, bn.Epoch, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	reasons, _ := d.u.EventReasons(d.ctx)
	t.Logf("webhook back: epoch %d holds on %s %v later; unit events %v", bn.Epoch, bn.Node, time.Since(backAt).Round(100*time.Millisecond), reasons)
	heal()
	d.oldRuntimeFenced(b1.Node, b1.Epoch)
	d.staleRuntimeStopped(b1.Node, b1.Epoch)
	d.staleRuntimeQuiet(b1.Node, b1.Epoch, bn.Epoch)
	d.oneWriter(b1.Epoch, bn.Epoch)
	d.oneHolder(bn.Epoch, bn.Node)
}

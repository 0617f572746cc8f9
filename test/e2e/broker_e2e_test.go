//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/runtime/telemetry"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/e2e/scenario"
)

// TestBrokerAwayDuringRebindDoesNotDelayTheNewHolder: the unit's runtimes
// publish their status and values to a real MQTT broker on the hub. The
// first binding is seen there, then the broker is made unreachable from every standby
// (nftables in each standby's own netns drops what it sends to the
// broker's port, so a connect hangs rather than being refused) and the
// primary's link is cut. Start-up never waits on the network (L8): the
// standby's runtime takes its lease at the next epoch and drives the device while
// its broker connects go unanswered, the whole failover holding as in the
// cut drill (one writer, the Events, the old runtime fenced and stopped).
// Readiness (L9) answers to the lease and the drivers, not the broker: the
// new pod is Ready with the broker away, its publishes waiting in its
// queue, and not one of them has reached the broker. When the broker is
// reachable again the runtime connects and the broker receives its status
// (the new epoch, Held, not fenced) and its values, and the queue drains.
func TestBrokerAwayDuringRebindDoesNotDelayTheNewHolder(t *testing.T) {
	broker, err := world.StartBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	d := newDrillWith(t, "broker-away", 0, func(o *scenario.UnitOptions) { o.MQTTBroker = broker.URL })

	// The broker is reachable and used before the fault, or its absence
	// would prove nothing.
	b1 := d.held(1)
	d.brokerStatus(broker, d.u.RuntimeClientID(b1.Epoch), b1.Epoch)

	standbys := world.NodeNames[1:]
	awayAt := time.Now()
	for _, n := range standbys {
		if err := world.Nodes[n].Drop(cluster.Outbound, scenario.BrokerPort); err != nil {
			t.Fatal(err)
		}
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		for _, n := range standbys {
			if err := world.Nodes[n].Heal(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(heal)

	_, b2 := d.failsOverAcross(func(n *cluster.Node) error { return n.Cut() }, func(n *cluster.Node) error { return n.Mend() })
	e2 := d.u.RuntimeClientID(b2.Epoch)
	t.Logf("epoch %d held on %s and writing with the broker away since %v", b2.Epoch, b2.Node, time.Since(awayAt).Round(time.Millisecond))

	// Still away: the new runtime is Ready, has queued its publishes, and
	// none reached the broker.
	d.podReady(b2.Epoch)
	metrics := fmt.Sprintf("http://%s:9441/metrics", world.Nodes[b2.Node].IP)
	depth, err := scrape(world.HTTPClient(), metrics, "holdfast_runtime_telemetry_queue_depth", nil)
	if err != nil {
		t.Fatal(err)
	}
	if depth == 0 {
		t.Fatalf("the epoch %d runtime has no publishes queued with its broker away", b2.Epoch)
	}
	if got := broker.From(e2); len(got) > 0 {
		t.Fatalf("the broker, unreachable from %s, received %d messages from %s, the first on %s", b2.Node, len(got), e2, got[0].Topic)
	}
	st, err := leaseStatus(world.HTTPClient(), fmt.Sprintf("http://%s:9443%s", world.Nodes[b2.Node].IP, lease.Path))
	if err != nil || st.Epoch != b2.Epoch || st.State != lease.Held || st.Fenced {
		t.Fatalf("the epoch %d runtime's own view with the broker away: %+v (%v)", b2.Epoch, st, err)
	}
	t.Logf("broker away %v: epoch %d Held, pod Ready, %v publishes queued, none received",
		time.Since(awayAt).Round(time.Millisecond), b2.Epoch, depth)

	// Back: the runtime connects and publishes as the new epoch.
	backAt := time.Now()
	heal()
	d.brokerStatus(broker, e2, b2.Epoch)
	if err := poll(d.ctx, time.Minute, func() bool {
		return slices.ContainsFunc(broker.From(e2), func(m scenario.Message) bool { return m.Topic == telemetryValuesTopic(d) })
	}); err != nil {
		t.Fatalf("no values from %s reached the broker after it came back", e2)
	}
	if err := poll(d.ctx, time.Minute, func() bool {
		v, err := scrape(world.HTTPClient(), metrics, "holdfast_runtime_telemetry_queue_depth", nil)
		return err == nil && v == 0
	}); err != nil {
		t.Fatalf("the epoch %d runtime's telemetry queue never drained after the broker came back", b2.Epoch)
	}
	t.Logf("broker reachable again: epoch %d's status and values received within %v", b2.Epoch, time.Since(backAt).Round(time.Millisecond))
	// A SCADA client subscribing now is told the current holder: the retained
	// status is the new epoch's Held, never the first's (runtime/README, the
	// status topic).
	var retained telemetry.Status
	if err := poll(d.ctx, time.Minute, func() bool {
		st, ok, err := broker.Retained(telemetry.DefaultTopicPrefix + "/" + d.u.Key.String() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		retained = st
		return ok && st.Epoch == b2.Epoch && st.State == string(lease.Held) && !st.Fenced
	}); err != nil {
		t.Fatalf("the broker's retained status for %s is not epoch %d Held: %+v", d.u.Key, b2.Epoch, retained)
	}
	d.oneHolder(b2.Epoch, b2.Node)
}

// brokerStatus waits until the broker has received from client a status of
// epoch that says Held and not fenced.
func (d *drill) brokerStatus(b *scenario.Broker, client string, epoch int64) {
	d.t.Helper()
	var last []telemetry.Status
	if err := poll(d.ctx, 2*time.Minute, func() bool {
		sts, err := b.Statuses(client)
		if err != nil {
			d.t.Fatal(err)
		}
		last = sts
		return slices.ContainsFunc(sts, func(s telemetry.Status) bool {
			return s.Epoch == epoch && s.State == string(lease.Held) && !s.Fenced && s.Unit == d.u.Key.String()
		})
	}); err != nil {
		d.t.Fatalf("the broker received no Held status of epoch %d from %s: %+v", epoch, client, last)
	}
}

// podReady waits until the runtime pod of epoch is Ready (the kubelet's
// gRPC readiness probe, L9).
func (d *drill) podReady(epoch int64) {
	d.t.Helper()
	var last []corev1.PodCondition
	if err := poll(d.ctx, time.Minute, func() bool {
		p, err := d.u.RuntimePod(d.ctx, epoch)
		if err != nil || p == nil {
			return false
		}
		last = p.Status.Conditions
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}); err != nil {
		d.t.Fatalf("the epoch %d runtime pod is not Ready: %+v", epoch, last)
	}
}

// telemetryValuesTopic is the unit's values topic (runtime/telemetry).
func telemetryValuesTopic(d *drill) string {
	return telemetry.DefaultTopicPrefix + "/" + d.u.Key.String() + "/values"
}

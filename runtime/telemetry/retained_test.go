package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"k8s.io/klog/v2/ktesting"

	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/telemetry/brokertest"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/ports"
)

const retainedUnit = "plant/kiln-1"

// Every test here runs two epochs' clients against one real broker (mochi)
// on loopback, and reads the topic as a plant's SCADA would: a fresh
// subscriber takes the retained status.

// epochClient is one epoch's runtime telemetry, connected through addr.
func epochClient(t *testing.T, addr, clientID string) *Client {
	t.Helper()
	c, err := New(Config{BrokerURL: "mqtt://" + addr, Unit: retainedUnit, ClientID: clientID, QueueSize: 100,
		MaxBackoff: 100 * time.Millisecond}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.ConnectBackground(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Disconnect(context.Background()) })
	return c
}

var subscribers atomic.Int64

// dialSubscriber connects a plain MQTT 5 client to addr and subscribes it
// to topic; every publish it receives goes to got.
func dialSubscriber(t *testing.T, addr, topic string, retainAsPublished bool, got func(*paho.Publish)) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("scada-%d", subscribers.Add(1))
	cli := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got(pr.Packet)
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: topic, QoS: 1, RetainAsPublished: retainAsPublished}}}); err != nil {
		t.Fatal(err)
	}
	return cli
}

// freshRetained is what a SCADA subscribing now is told: the retained
// status, or ok false when none comes within 2s.
func freshRetained(t *testing.T, addr, topic string) (st Status, raw string, ok bool) {
	t.Helper()
	retained := make(chan *paho.Publish, 16)
	cli := dialSubscriber(t, addr, topic, false, func(p *paho.Publish) {
		if p.Retain { // a live publish is forwarded without the flag
			retained <- p
		}
	})
	defer func() { _ = cli.Disconnect(&paho.Disconnect{}) }()
	select {
	case p := <-retained:
		if err := json.Unmarshal(p.Payload, &st); err != nil {
			return Status{}, string(p.Payload), true
		}
		return st, string(p.Payload), true
	case <-time.After(2 * time.Second):
		return Status{}, "", false
	}
}

// eventuallyRetained waits until a fresh subscriber is told epoch's state.
func eventuallyRetained(t *testing.T, addr, topic string, epoch int64, state string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, raw, ok := freshRetained(t, addr, topic)
		if ok && st.Epoch == epoch && st.State == state && st.Unit == retainedUnit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a fresh subscriber is told %q (retained: %v), want epoch %d %s", raw, ok, epoch, state)
		}
	}
}

// observer records every publish on the topic with its retain flag as
// published (MQTT 5 Retain As Published).
type observer struct {
	mu   sync.Mutex
	msgs []*paho.Publish
}

func observe(t *testing.T, addr, topic string) *observer {
	o := &observer{}
	cli := dialSubscriber(t, addr, topic, true, func(p *paho.Publish) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.msgs = append(o.msgs, p)
	})
	t.Cleanup(func() { _ = cli.Disconnect(&paho.Disconnect{}) })
	return o
}

// find returns the first publish seen whose payload is payload.
func (o *observer) find(payload []byte) *paho.Publish {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.msgs {
		if string(p.Payload) == string(payload) {
			return p
		}
	}
	return nil
}

// TestRetainedStatusNeverGoesBackToALowerEpoch: epoch 1 holds and is cut
// off from the broker; epoch 2 takes over and publishes Held; epoch 1,
// fenced, comes back with its fence queued and re-announces. A fresh
// subscriber is told epoch 2's Held, also after the broker restarts empty,
// and once epoch 1 has seen epoch 2 its later statuses reach live
// subscribers not retained, so they leave epoch 2's Held in the broker even
// with epoch 2's runtime away.
func TestRetainedStatusNeverGoesBackToALowerEpoch(t *testing.T) {
	addr := ports.Addr(t)
	srv := brokertest.Start(t, addr)
	defer func() { _ = srv.Close() }()
	link, err := devicesim.NewLink(addr, true) // epoch 1's network path to the broker
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()

	e1 := epochClient(t, link.Addr(), "holdfast-kiln-1-runtime-e1")
	topic := e1.StatusTopic()
	e1.SetStatus(Status{Unit: retainedUnit, Epoch: 1, State: "Held"})
	eventuallyRetained(t, addr, topic, 1, "Held")

	link.Cut()
	testutil.Eventually(t, 20*time.Second, "epoch 1 to lose the broker", func() bool { return !e1.Connected() })
	e2 := epochClient(t, addr, "holdfast-kiln-1-runtime-e2")
	e2.SetStatus(Status{Unit: retainedUnit, Epoch: 2, State: "Held"})
	eventuallyRetained(t, addr, topic, 2, "Held")

	// Epoch 1 fences while cut off; the network mends before the node
	// plugin stops it.
	e1.SetStatus(Status{Unit: retainedUnit, Epoch: 1, State: "Fenced", Fenced: true})
	connects := e1.Connects()
	link.Open()
	testutil.Eventually(t, 20*time.Second, "epoch 1 to reconnect, drain its queue and see epoch 2", func() bool {
		return e1.Connected() && e1.Connects() > connects && e1.QueueDepth() == 0 && e1.HighestEpochSeen() == 2
	})
	eventuallyRetained(t, addr, topic, 2, "Held")

	// The broker restarts with nothing retained; both re-announce.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "both to see the broker gone", func() bool { return !e1.Connected() && !e2.Connected() })
	c1, c2 := e1.Connects(), e2.Connects()
	srv = brokertest.Start(t, addr)
	testutil.Eventually(t, 20*time.Second, "both to reconnect", func() bool {
		return e1.Connected() && e2.Connected() && e1.Connects() > c1 && e2.Connects() > c2 &&
			e1.QueueDepth() == 0 && e2.QueueDepth() == 0
	})
	eventuallyRetained(t, addr, topic, 2, "Held")

	// Epoch 2's runtime goes away; epoch 1, which has seen epoch 2, publishes
	// again. A live subscriber gets it, not retained, and the broker still
	// tells a fresh one epoch 2's Held.
	o := observe(t, addr, topic)
	e2.Disconnect(context.Background())
	late := Status{Unit: retainedUnit, Epoch: 1, State: "Fenced", Fenced: true, At: time.Now().UTC().Add(time.Second)}
	payload, _ := json.Marshal(late)
	e1.SetStatus(late)
	testutil.Eventually(t, 20*time.Second, "epoch 1's late status to reach a live subscriber", func() bool { return o.find(payload) != nil })
	if p := o.find(payload); p.Retain {
		t.Fatalf("epoch 1, having seen epoch 2, published its status retained: %s", p.Payload)
	}
	if st, raw, ok := freshRetained(t, addr, topic); !ok || st.Epoch != 2 || st.State != "Held" {
		t.Fatalf("with epoch 2 away, a fresh subscriber is told %q (retained: %v), want epoch 2 Held", raw, ok)
	}
}

// TestRetainedStatusHealsWhenAStalePublishLandsAfterTheHolders: the race
// the subscription cannot close. A reconnecting epoch 1 runtime's queued
// status leaves before its subscription has told it of epoch 2, and lands
// after epoch 2's Held; here that packet is sent by a plain client, so it
// lands after epoch 2's every time. Epoch 2's runtime sees it and
// re-publishes; likewise when the retained status is cleared (an empty
// retained publish) or overwritten with something that is not the unit's
// status.
func TestRetainedStatusHealsWhenAStalePublishLandsAfterTheHolders(t *testing.T) {
	addr := ports.Addr(t)
	srv := brokertest.Start(t, addr)
	defer func() { _ = srv.Close() }()
	e2 := epochClient(t, addr, "holdfast-kiln-1-runtime-e2")
	topic := e2.StatusTopic()
	e2.SetStatus(Status{Unit: retainedUnit, Epoch: 2, State: "Held"})
	testutil.Eventually(t, 20*time.Second, "epoch 2 to see its own status on the topic", func() bool { return e2.HighestEpochSeen() == 2 })
	eventuallyRetained(t, addr, topic, 2, "Held")
	o := observe(t, addr, topic)

	stale, _ := json.Marshal(Status{Unit: retainedUnit, Epoch: 1, State: "Fenced", Fenced: true, At: time.Now().UTC()})
	stalePublisher := dialSubscriber(t, addr, "holdfast/unrelated", false, func(*paho.Publish) {})
	defer func() { _ = stalePublisher.Disconnect(&paho.Disconnect{}) }()
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"a lower epoch's status", stale},
		{"the retained status cleared", []byte{}},
		{"not a status of the unit", []byte(`{"unit":"plant/kiln-2","epoch":9,"state":"Held"}`)},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := stalePublisher.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: tc.payload})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(tc.payload) > 0 {
			// The stale packet reached the broker after epoch 2's Held.
			testutil.Eventually(t, 20*time.Second, tc.name+" to land", func() bool { return o.find(tc.payload) != nil })
		}
		eventuallyRetained(t, addr, topic, 2, "Held")
	}
}

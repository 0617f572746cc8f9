package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"k8s.io/klog/v2/ktesting"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/driver/simdriver"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/telemetry"
	"github.com/holdfast-io/holdfast/runtime/telemetry/brokertest"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/ports"
)

// startBounded runs Start and fails the test unless it returns within 10s:
// the bound is the assertion that start-up waited on nothing.
func startBounded(t *testing.T, rt *runtime.Runtime) time.Duration {
	t.Helper()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- rt.Start(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s")
	}
	return time.Since(began)
}

func newRuntime(t *testing.T, drivers []driver.Driver, tel *telemetry.Client) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(runtime.Config{
		Lease: lease.Config{Unit: unit, Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: leaseLength,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: "uid-start"}},
		LeaseAddr: "127.0.0.1:0", LeaseTLSDir: leaseTLSDir(t, 1), HealthAddr: "127.0.0.1:0",
		Drivers: drivers, Telemetry: tel, ScanInterval: 100 * time.Millisecond,
	}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// #1936: two couplers whose dials never answer and a simulation driver that
// takes 300ms to connect. Start returns with both dials in flight and the
// simulation driver connected, and the lease is granted over HTTP while
// the dials are still on the wire; then one coupler answers.
func TestStart_ALeaseIsGrantedWhileTheCouplerHasNotAnswered(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	links := make([]*devicesim.Link, 2)
	for i := range links {
		if links[i], err = devicesim.NewLink(sim.Addr(), false); err != nil {
			t.Fatal(err)
		}
		defer links[i].Close()
	}
	simDrv := simdriver.New("sim-1", 300*time.Millisecond)
	rt := newRuntime(t, []driver.Driver{
		modbusDriver(t, "coupler-1", links[0].Addr(), 30*time.Second),
		modbusDriver(t, "coupler-2", links[1].Addr(), 30*time.Second),
		simDrv,
	}, nil)
	took := startBounded(t, rt)
	defer rt.Stop(context.Background())
	defer links[1].Cut() // fail the dial still held, so Stop need not wait out its timeout

	if !simDrv.Connected() {
		t.Fatal("the simulation driver was not connected when Start returned")
	}
	if took < 300*time.Millisecond {
		t.Fatalf("Start returned in %v, before the simulation driver's 300ms connect", took)
	}
	c1, c2 := rt.Driver("coupler-1").(*driver.Reconnecting), rt.Driver("coupler-2").(*driver.Reconnecting)
	testutil.Eventually(t, 5*time.Second, "both dials to reach their couplers", func() bool {
		return links[0].Accepted() == 1 && links[1].Accepted() == 1
	})
	if c1.Connected() || c2.Connected() || c1.Dials() != 1 || c2.Dials() != 1 {
		t.Fatalf("the dials are not in flight: connected %v/%v, dials %d/%d", c1.Connected(), c2.Connected(), c1.Dials(), c2.Dials())
	}
	if r := grantHTTP(t, "https://"+rt.LeaseAddr()+leaseapi.Path, 1, 0); r.State != leaseapi.Held {
		t.Fatalf("grant with both dials on the wire answered %+v, want Held", r)
	}
	if c1.Connected() || c2.Connected() {
		t.Fatal("a coupler connected before it answered")
	}
	links[0].Open()
	testutil.Eventually(t, 10*time.Second, "coupler-1 to connect once it answers", c1.Connected)
	if c2.Connected() {
		t.Fatal("coupler-2 connected without answering")
	}
}

// #1933: a Failover runtime whose broker is a closed loopback port starts,
// is granted over HTTP with the client still disconnected, and both of its
// status publishes wait in the queue, in order.
func TestStart_ALeaseIsGrantedWhileTheBrokerIsUnreachable(t *testing.T) {
	tel, err := telemetry.New(telemetry.Config{BrokerURL: "mqtt://" + ports.Addr(t), Unit: unit, QueueSize: 100,
		MaxBackoff: 200 * time.Millisecond}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, []driver.Driver{simdriver.New("sim-1", 0)}, tel)
	startBounded(t, rt)
	defer rt.Stop(context.Background())
	if r := grantHTTP(t, "https://"+rt.LeaseAddr()+leaseapi.Path, 1, 0); r.State != leaseapi.Held {
		t.Fatalf("grant answered %+v, want Held", r)
	}
	if tel.Connected() {
		t.Fatal("the client reports a connection to a closed port")
	}
	var states []string
	for _, m := range tel.Queued() {
		if m.Topic != tel.StatusTopic() {
			continue
		}
		var st telemetry.Status
		if err := json.Unmarshal(m.Payload, &st); err != nil {
			t.Fatal(err)
		}
		if !m.Retain || m.QoS != 1 {
			t.Fatalf("status publish retain=%v qos=%d, want retained at QoS 1", m.Retain, m.QoS)
		}
		states = append(states, st.State)
	}
	if len(states) != 2 || states[0] != string(leaseapi.Ungranted) || states[1] != string(leaseapi.Held) {
		t.Fatalf("queued statuses %v, want [Ungranted Held]", states)
	}
}

type broker struct {
	srv  *mqtt.Server
	addr string
}

func startBroker(t *testing.T, addr string) *broker {
	t.Helper()
	return &broker{srv: brokertest.Start(t, addr), addr: addr}
}

// retainedState is the status the broker would hand a new subscriber.
func (b *broker) retainedState(t *testing.T, topic string) string {
	t.Helper()
	msgs := b.srv.Topics.Messages(topic)
	if len(msgs) == 0 {
		return ""
	}
	var st telemetry.Status
	if err := json.Unmarshal(msgs[len(msgs)-1].Payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.State
}

// #1933: every connect re-announces the current status through the queue.
// A fresh broker that comes back holding nothing retained is told what the
// runtime is now.
func TestStart_TheStatusIsAnnouncedOnEveryConnect(t *testing.T) {
	addr := ports.Addr(t)
	b := startBroker(t, addr)
	tel, err := telemetry.New(telemetry.Config{BrokerURL: "mqtt://" + addr, Unit: unit, QueueSize: 100,
		MaxBackoff: 200 * time.Millisecond}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, []driver.Driver{simdriver.New("sim-1", 0)}, tel)
	startBounded(t, rt)
	defer rt.Stop(context.Background())
	testutil.Eventually(t, 10*time.Second, "the first connect", tel.Connected)
	testutil.Eventually(t, 10*time.Second, "the status Ungranted on the topic", func() bool {
		return b.retainedState(t, tel.StatusTopic()) == string(leaseapi.Ungranted)
	})
	grantHTTP(t, "https://"+rt.LeaseAddr()+leaseapi.Path, 1, 0)
	testutil.Eventually(t, 10*time.Second, "the status Held on the topic", func() bool {
		return b.retainedState(t, tel.StatusTopic()) == string(leaseapi.Held)
	})

	// The broker goes away and a fresh one, with nothing retained, comes back.
	if err := b.srv.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the client to see the broker gone", func() bool { return !tel.Connected() })
	connects := tel.Connects()
	b = startBroker(t, addr)
	defer b.srv.Close()
	if got := b.retainedState(t, tel.StatusTopic()); got != "" {
		t.Fatalf("a fresh broker holds %q already", got)
	}
	testutil.Eventually(t, 10*time.Second, "the reconnect", func() bool { return tel.Connected() && tel.Connects() > connects })
	testutil.Eventually(t, 10*time.Second, "the status re-announced to the fresh broker", func() bool {
		return b.retainedState(t, tel.StatusTopic()) == string(leaseapi.Held)
	})
}

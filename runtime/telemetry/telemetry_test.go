package telemetry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/runtime/telemetry/brokertest"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
	"k8s.io/klog/v2/ktesting"
)

// With the queue disabled (--mqtt-queue-size 0) a publish goes out live,
// retained, once the broker is there.
func TestWithoutAQueueTheStatusIsPublishedLive(t *testing.T) {
	addr := ports.Addr(t)
	srv := brokertest.Start(t, addr)
	defer srv.Close()
	c, err := New(Config{BrokerURL: "mqtt://" + addr, Unit: "plant/kiln-1", QueueSize: 0, MaxBackoff: 100 * time.Millisecond},
		ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.ConnectBackground(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	poll.Until(t, 10*time.Second, "the client to connect", poll.True(c.Connected))
	c.SetStatus(Status{Unit: "plant/kiln-1", Epoch: 2, State: "Held"})
	poll.Until(t, 10*time.Second, "the status to reach the broker", poll.True(func() bool {
		return len(srv.Topics.Messages(c.StatusTopic())) == 1
	}))
	msgs := srv.Topics.Messages(c.StatusTopic())
	var st Status
	if err := json.Unmarshal(msgs[0].Payload, &st); err != nil || st.State != "Held" || st.Epoch != 2 {
		t.Fatalf("retained status %s (%v)", msgs[0].Payload, err)
	}
	if c.QueueDepth() != 0 || c.Queued() != nil {
		t.Fatal("a client without a queue reports queued publishes")
	}
}

func TestNewRefusesABadConfigurationWithTheReason(t *testing.T) {
	_, err := New(Config{BrokerURL: "http://broker", Unit: "kiln", QueueSize: -1}, ktesting.NewLogger(t, ktesting.NewConfig()))
	for _, want := range []string{`scheme "http"`, `unit: "kiln": must be namespace/name`, "queue size: -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error %v, want it to name %q", err, want)
		}
	}
	if _, err := New(Config{BrokerURL: "mqtt://broker", Unit: "plant/kiln-1"}, ktesting.NewLogger(t, ktesting.NewConfig())); err == nil {
		t.Error("a broker URL without a port was accepted")
	}
}

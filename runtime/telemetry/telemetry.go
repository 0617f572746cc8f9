// Package telemetry publishes the runtime's status and values over MQTT
// (github.com/eclipse/paho.golang autopaho). A broker is a transport and
// not a precondition of control (#1933): ConnectBackground returns at once
// and fails only on configuration; publishes wait in a bounded FIFO queue
// while the broker is away; and every connect re-announces the current
// status through that queue, behind everything queued before it, so a
// returning or fresh broker is never left asserting a state the runtime has
// left.
//
// # The retained status never goes back to a lower epoch
//
// Every epoch's runtime publishes its status retained on the one status
// topic, and the broker keeps whichever it processed last. A fenced runtime
// of an earlier epoch, cut off and then mended before the node plugin stops
// it, would otherwise re-announce "epoch 1 ..." retained over the current
// holder's, and a SCADA subscribing afterwards would be told the wrong
// holder. So every client subscribes to its own unit's status topic and
// keeps the highest epoch it has seen there, and:
//
//   - a client that has seen a higher epoch than its own never publishes
//     its status retained again (it still publishes it, not retained, so
//     live subscribers see its fence); the decision is taken when the
//     publish leaves for the broker, not when it was queued, so a status
//     queued through an outage does not go out retained after the client
//     learned of a later epoch;
//   - a client that has seen no higher epoch re-publishes its current
//     status, retained, whenever it sees a status of a lower epoch, an empty
//     payload (the retained status cleared) or something that is not a
//     status of its unit: the one race left (on reconnect a stale runtime's
//     queued publish, or a QoS 1 publish its client resends, leaves before
//     its subscription has told it of the later epoch; MQTT gives no signal
//     that no retained status exists, so it cannot wait for one) heals as
//     soon as the holder sees the stale publish.
//
// The highest epoch therefore always has the last word. No loop: the
// lower client stops retaining once it sees the higher one, and the
// highest answers only to lower epochs, never to its own. It heals on any
// lower-epoch status, retained or not, because a subscriber cannot tell
// how a live message was published on a broker that ignores
// Retain As Published; the cost is one extra publish per stale status.
// Seeing a higher epoch on MQTT changes nothing but telemetry: the broker
// is not a lease authority and fences nobody.
package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"k8s.io/klog/v2"
)

// Defaults of a Config.
const (
	DefaultTopicPrefix = "holdfast"
	DefaultQueueSize   = 1000
	DefaultMaxBackoff  = 5 * time.Second
)

// Config of the telemetry client.
type Config struct {
	// BrokerURL is mqtt://host:port (or tls://host:port with TLS).
	BrokerURL string
	TLS       *tls.Config
	ClientID  string
	// TopicPrefix; topics are <prefix>/<namespace>/<unit>/status and /values.
	TopicPrefix string
	// Unit is namespace/name.
	Unit string
	// QueueSize bounds the store-and-forward queue; 0 disables it: every
	// publish is sent live and dropped while the broker is away.
	QueueSize int
	// MaxBackoff between connection attempts.
	MaxBackoff time.Duration
	KeepAlive  uint16
}

// Status is the retained status message. Consumers order statuses by
// Epoch first (a higher epoch wins, whenever it arrives), then by arrival
// within an epoch; the retained one converges to the highest epoch's.
type Status struct {
	Unit         string    `json:"unit"`
	Epoch        int64     `json:"epoch"`
	Mode         string    `json:"mode"`
	State        string    `json:"state"`
	Fenced       bool      `json:"fenced"`
	PodUID       string    `json:"podUID,omitempty"`
	RestartCount int32     `json:"restartCount"`
	At           time.Time `json:"at"`
}

// Client is the runtime's MQTT client.
type Client struct {
	cfg    Config
	broker *url.URL
	log    klog.Logger
	queue  *Queue

	mu        sync.Mutex
	cm        *autopaho.ConnectionManager
	status    Status
	hasStatus bool
	// highest is the highest epoch seen on the status topic, ours included.
	highest int64
	// pubMu makes reading the current status and queueing it one step, so
	// a re-publish can never queue a status older than one SetStatus has
	// already queued.
	pubMu     sync.Mutex
	connected atomic.Bool
	connects  atomic.Int64
}

// New checks cfg; it dials nothing.
func New(cfg Config, log klog.Logger) (*Client, error) {
	var errs []error
	u, err := url.Parse(cfg.BrokerURL)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("mqtt broker URL: %w", err))
	case u.Scheme != "mqtt" && u.Scheme != "tcp" && u.Scheme != "tls" && u.Scheme != "mqtts":
		errs = append(errs, fmt.Errorf("mqtt broker URL: scheme %q: must be mqtt, tcp, tls or mqtts", u.Scheme))
	case u.Port() == "":
		errs = append(errs, fmt.Errorf("mqtt broker URL: %q: must name host:port", cfg.BrokerURL))
	}
	if cfg.Unit == "" || !strings.Contains(cfg.Unit, "/") {
		errs = append(errs, fmt.Errorf("unit: %q: must be namespace/name", cfg.Unit))
	}
	if cfg.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("mqtt queue size: %d: must not be negative", cfg.QueueSize))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = DefaultTopicPrefix
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 20
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "holdfast-runtime-" + strings.ReplaceAll(cfg.Unit, "/", "-")
	}
	c := &Client{cfg: cfg, broker: u, log: log.WithValues("broker", u.Host)}
	if cfg.QueueSize > 0 {
		c.queue = NewQueue(cfg.QueueSize)
	}
	return c, nil
}

// ClientID is the MQTT client ID this client connects with.
func (c *Client) ClientID() string { return c.cfg.ClientID }

// StatusTopic is where the retained status goes.
func (c *Client) StatusTopic() string { return c.cfg.TopicPrefix + "/" + c.cfg.Unit + "/status" }

// ValuesTopic is where the values go.
func (c *Client) ValuesTopic() string { return c.cfg.TopicPrefix + "/" + c.cfg.Unit + "/values" }

// ConnectBackground starts the connection manager and returns at once; it
// is the only connect the runtime has; there is no blocking form.
func (c *Client) ConnectBackground(ctx context.Context) error {
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{c.broker},
		TlsCfg:                        c.cfg.TLS,
		KeepAlive:                     c.cfg.KeepAlive,
		CleanStartOnInitialConnection: true,
		ConnectTimeout:                5 * time.Second,
		ReconnectBackoff:              backoff(c.cfg.MaxBackoff),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			c.connected.Store(true)
			c.connects.Add(1)
			c.log.Info("Connected to MQTT broker")
			// No session expiry interval: the broker drops the session, and
			// the subscription with it, when a connection ends, so every
			// connect subscribes again, off this callback, which must not
			// block.
			go c.subscribe(ctx, cm)
			c.announce()
		},
		OnConnectionDown: func() bool {
			c.connected.Store(false)
			c.log.Info("Lost MQTT broker, publishes are queued")
			return true
		},
		OnConnectError: func(err error) { c.log.V(2).Info("MQTT connect attempt failed", "err", err) },
		ClientConfig: paho.ClientConfig{ClientID: c.cfg.ClientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){c.received}},
	}
	if c.queue != nil {
		cfg.Queue = sendQueue{Queue: c.queue, c: c}
	}
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		return fmt.Errorf("mqtt: %w", err)
	}
	c.mu.Lock()
	c.cm = cm
	c.mu.Unlock()
	return nil
}

func backoff(maxBackoff time.Duration) func(int) time.Duration {
	return func(attempt int) time.Duration {
		if attempt == 0 {
			return 0
		}
		d := 100 * time.Millisecond << min(attempt, 10)
		return min(d, maxBackoff)
	}
}

// subscribe asks for the unit's status topic on this connection; the
// broker answers with the retained status, then every later one.
func (c *Client) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: c.StatusTopic(), QoS: 1},
	}})
	if err != nil {
		// The next connect subscribes again; until then the holder's own
		// announce on that connect is what heals the topic.
		c.log.V(2).Info("MQTT subscribe to the status topic failed", "err", err)
	}
}

// received handles a status seen on the unit's status topic: it raises the
// highest epoch seen, and the client of the highest epoch answers anything
// lower (or not a status of its unit) with its own, retained.
func (c *Client) received(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	if p == nil || p.Topic != c.StatusTopic() {
		return false, nil
	}
	var st Status
	valid := len(p.Payload) > 0 && json.Unmarshal(p.Payload, &st) == nil && st.Unit == c.cfg.Unit
	c.mu.Lock()
	if valid && st.Epoch > c.highest {
		if c.hasStatus && st.Epoch > c.status.Epoch && c.highest <= c.status.Epoch {
			c.log.Info("A later epoch's status is on the topic, no longer publishing the status retained",
				"epoch", c.status.Epoch, "seen", st.Epoch)
		}
		c.highest = st.Epoch
	}
	heal := c.hasStatus && c.highest <= c.status.Epoch && (!valid || st.Epoch < c.status.Epoch)
	c.mu.Unlock()
	if heal {
		c.log.V(2).Info("Re-publishing the status over a stale one", "seen", string(p.Payload))
		c.announce()
	}
	return true, nil
}

// superseded reports whether a later epoch's status has been seen on the
// topic: this client's status is then no longer the one to retain.
func (c *Client) superseded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hasStatus && c.highest > c.status.Epoch
}

// HighestEpochSeen is the highest epoch of a status seen on the status
// topic (this client's own included); 0 before any.
func (c *Client) HighestEpochSeen() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.highest
}

// announce re-publishes the current status (on a connect, or over a stale
// status). It goes through the queue, behind anything older, so a status
// queued before it can never land after it and leave the broker asserting
// a state already left.
func (c *Client) announce() {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.mu.Lock()
	st, ok := c.status, c.hasStatus
	c.mu.Unlock()
	if ok {
		c.publishStatus(st)
	}
}

// SetStatus records the current status and publishes it: retained unless
// a later epoch's status has been seen on the topic.
func (c *Client) SetStatus(st Status) {
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.mu.Lock()
	c.status, c.hasStatus = st, true
	c.mu.Unlock()
	c.publishStatus(st)
}

// publishStatus marks the status retained; whether it goes out retained is
// decided as it leaves (sendQueue, publish).
func (c *Client) publishStatus(st Status) {
	b, _ := json.Marshal(st)
	c.publish(&paho.Publish{Topic: c.StatusTopic(), Payload: b, Retain: true, QoS: 1})
}

// sendQueue is the queue as the connection manager reads it: a retained
// publish leaves without its retain flag once the client is superseded.
type sendQueue struct {
	*Queue
	c *Client
}

func (q sendQueue) Peek() (queue.Entry, error) {
	e, err := q.Queue.Peek()
	if err != nil {
		return e, err
	}
	return unretainEntry{Entry: e, c: q.c}, nil
}

type unretainEntry struct {
	queue.Entry
	c *Client
}

// Reader clears the RETAIN bit (bit 0 of a PUBLISH's first byte, MQTT 5
// §3.3.1) of a copy when the client is superseded.
func (e unretainEntry) Reader() (io.Reader, error) {
	r, err := e.Entry.Reader()
	if err != nil {
		return r, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[0]>>4 == packets.PUBLISH && b[0]&0x01 != 0 && e.c.superseded() {
		b = append([]byte(nil), b...)
		b[0] &^= 0x01
	}
	return bytes.NewReader(b), nil
}

// PublishValues publishes one scan's values (not retained).
func (c *Client) PublishValues(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.publish(&paho.Publish{Topic: c.ValuesTopic(), Payload: b, QoS: 0})
}

func (c *Client) publish(p *paho.Publish) {
	if c.queue != nil {
		// Enqueued directly, not through the manager, so a publish made
		// before ConnectBackground keeps its place in the order too.
		var b bytes.Buffer
		if _, err := p.Packet().WriteTo(&b); err == nil {
			_ = c.queue.Enqueue(&b)
		}
		return
	}
	c.mu.Lock()
	cm := c.cm
	c.mu.Unlock()
	if cm == nil {
		return
	}
	// No queue: nothing to race, so a live publish on its own goroutine,
	// dropped when the broker is away.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if p.Retain && c.superseded() {
			p.Retain = false
		}
		if _, err := cm.Publish(ctx, p); err != nil {
			c.log.V(2).Info("Dropped a publish while the broker is away", "topic", p.Topic, "err", err)
		}
	}()
}

// QueueDepth is the number of queued publishes.
func (c *Client) QueueDepth() int {
	if c.queue == nil {
		return 0
	}
	return c.queue.Len()
}

// Queued decodes the queued publishes, oldest first.
func (c *Client) Queued() []Message {
	if c.queue == nil {
		return nil
	}
	return c.queue.Messages()
}

// Connected reports whether the broker connection is up.
func (c *Client) Connected() bool { return c.connected.Load() }

// Connects counts connections made (including reconnections).
func (c *Client) Connects() int64 { return c.connects.Load() }

// Disconnect closes the connection manager.
func (c *Client) Disconnect(ctx context.Context) {
	c.mu.Lock()
	cm := c.cm
	c.mu.Unlock()
	if cm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

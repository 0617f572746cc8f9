// Package telemetry publishes the runtime's status and values over MQTT
// (github.com/eclipse/paho.golang autopaho). A broker is a transport and
// not a precondition of control (#1933): ConnectBackground returns at once
// and fails only on configuration; publishes wait in a bounded FIFO queue
// while the broker is away; and every connect re-announces the current
// status through that queue, behind everything queued before it, so a
// returning or fresh broker is never left asserting a state the runtime has
// left.
package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
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

// Status is the retained status message.
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
		OnConnectionUp: func(*autopaho.ConnectionManager, *paho.Connack) {
			c.connected.Store(true)
			c.connects.Add(1)
			c.log.Info("Connected to MQTT broker")
			c.announce()
		},
		OnConnectionDown: func() bool {
			c.connected.Store(false)
			c.log.Info("Lost MQTT broker, publishes are queued")
			return true
		},
		OnConnectError: func(err error) { c.log.V(2).Info("MQTT connect attempt failed", "err", err) },
		ClientConfig:   paho.ClientConfig{ClientID: c.cfg.ClientID},
	}
	if c.queue != nil {
		cfg.Queue = c.queue
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

// announce re-publishes the current status on a connect. It goes through
// the queue, behind anything older, so a status queued before it can never
// land after it and leave the broker asserting a state already left.
func (c *Client) announce() {
	c.mu.Lock()
	st, ok := c.status, c.hasStatus
	c.mu.Unlock()
	if ok {
		c.publishStatus(st)
	}
}

// SetStatus records the current status and publishes it, retained.
func (c *Client) SetStatus(st Status) {
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	c.mu.Lock()
	c.status, c.hasStatus = st, true
	c.mu.Unlock()
	c.publishStatus(st)
}

func (c *Client) publishStatus(st Status) {
	b, _ := json.Marshal(st)
	c.publish(&paho.Publish{Topic: c.StatusTopic(), Payload: b, Retain: true, QoS: 1})
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

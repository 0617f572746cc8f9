package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/holdfast-io/holdfast/runtime/telemetry"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// BrokerPort is the MQTT broker's port on the hub (cluster.HubIP).
const BrokerPort = 1883

// Broker is a real MQTT broker (mochi-mqtt) served by this process on the
// hub's bridge address, where every node's runtimes reach it. It records
// every message published on holdfast's topics, with the client that sent
// it.
type Broker struct {
	// URL is what a runtime's --mqtt-broker names.
	URL string
	srv *mqtt.Server

	mu   sync.Mutex
	msgs []Message
}

// Message is one publish the broker received.
type Message struct {
	Topic string
	// Client is the publishing client's ID (the runtime's is
	// "holdfast-<pod name>").
	Client  string
	Payload []byte
	At      time.Time
}

// StartBroker starts the broker on HubIP:BrokerPort; Close stops it.
func (w *World) StartBroker() (*Broker, error) {
	addr := fmt.Sprintf("%s:%d", cluster.HubIP, BrokerPort)
	ln, err := w.ListenInHub("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mqtt broker: %w", err)
	}
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b := &Broker{URL: "mqtt://" + addr, srv: srv}
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		ln.Close()
		return nil, err
	}
	if err := srv.AddListener(listeners.NewNet("hub", ln)); err != nil {
		ln.Close()
		return nil, err
	}
	if err := srv.Serve(); err != nil {
		ln.Close()
		return nil, err
	}
	err = srv.Subscribe(telemetry.DefaultTopicPrefix+"/#", 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.msgs = append(b.msgs, Message{Topic: pk.TopicName, Client: pk.Origin, Payload: pk.Payload, At: time.Now()})
	})
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return b, nil
}

// Close stops the broker and closes its clients' connections.
func (b *Broker) Close() error { return b.srv.Close() }

// From lists the messages client published, oldest first.
func (b *Broker) From(client string) []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Message
	for _, m := range b.msgs {
		if m.Client == client {
			out = append(out, m)
		}
	}
	return out
}

// Retained decodes the status the broker would hand a new subscriber on
// topic (its retained message); ok is false when it holds none.
func (b *Broker) Retained(topic string) (st telemetry.Status, ok bool, err error) {
	for _, pk := range b.srv.Topics.Messages(topic) {
		if pk.TopicName != topic || len(pk.Payload) == 0 {
			continue
		}
		if err := json.Unmarshal(pk.Payload, &st); err != nil {
			return st, false, fmt.Errorf("retained status on %s: %q: %w", topic, pk.Payload, err)
		}
		return st, true, nil
	}
	return st, false, nil
}

// Statuses decodes the status messages client published, oldest first.
func (b *Broker) Statuses(client string) ([]telemetry.Status, error) {
	var out []telemetry.Status
	for _, m := range b.From(client) {
		if !strings.HasSuffix(m.Topic, "/status") {
			continue
		}
		var st telemetry.Status
		if err := json.Unmarshal(m.Payload, &st); err != nil {
			return out, fmt.Errorf("status from %s on %s: %q: %w", client, m.Topic, m.Payload, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// RuntimeClientID is the MQTT client ID of the unit's runtime pod of epoch
// (runtime/app derives it from the pod name).
func (u *Unit) RuntimeClientID(epoch int64) string {
	return fmt.Sprintf("holdfast-%s-runtime-e%d", u.Key.Name, epoch)
}

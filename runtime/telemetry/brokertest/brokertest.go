// Package brokertest starts a real MQTT broker (mochi) on loopback for the
// runtime's telemetry tests, with every client allowed.
package brokertest

import (
	"io"
	"log/slog"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Start serves a broker on addr (host:port); the caller closes it, which is
// how tests take the broker away.
func Start(t testing.TB, addr string) *mqtt.Server {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	return srv
}

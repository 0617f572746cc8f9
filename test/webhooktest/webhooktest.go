// Package webhooktest runs the real admission webhook in the test's own
// process, where a testenv control plane sends its admission reviews.
package webhooktest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/webhook"
)

// StartWebhook serves webhook.Register's handlers with opts on the host,
// port and certificates envtest registered with env's apiserver, and
// returns once the server answers. It reads through a direct client, as
// the binary reads through the manager's APIReader. stop ends the server
// and waits for it.
func StartWebhook(env *testenv.Env, opts *webhook.Options) (stop func(), err error) {
	scheme, err := webhook.NewScheme()
	if err != nil {
		return nil, err
	}
	reader, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	srv := crwebhook.NewServer(crwebhook.Options{
		Host:    env.Webhooks.LocalServingHost,
		Port:    env.Webhooks.LocalServingPort,
		CertDir: env.Webhooks.LocalServingCertDir,
	})
	webhook.Register(srv, scheme, reader, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	stop = func() { cancel(); <-done }
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := srv.StartedChecker()(&http.Request{})
		if err == nil {
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("webhook server did not start: %w", err)
		}
		select {
		case err := <-done:
			return nil, fmt.Errorf("webhook server stopped: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

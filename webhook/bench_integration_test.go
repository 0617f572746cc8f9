//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// benchRate is the offered load: requests start every 2ms whatever the
// latency of the ones before (open loop), as kubectl users and components
// would send them.
const benchRate = 500

// BenchmarkAdmissionLatency measures what the webhook adds to guarded
// requests through the real apiserver: the same b.N requests at 500/s with
// the configuration registered and then unregistered, p50 and p99 of each
// and the difference. Run with
//
//	go test -tags integration ./webhook -run '^$' -bench AdmissionLatency -benchtime 3000x
func BenchmarkAdmissionLatency(b *testing.B) {
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the apiserver, not client-go, is measured
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	makeNode(b, "bench-1", nil, nil, true)
	ns := env.Namespace(b)
	env.Kubectl().MustRun(b, unitYAML(ns, "kiln-b", "    mode: Autonomy"), "apply", "-f", "-")

	for _, tc := range []struct {
		name string
		send func(i int) error
	}{
		{"node-holdfast-annotation", func(i int) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"fsyncP99Millis\":%d}"}}}`, holdfastv1.AnnotationFitness, i)
			return c.Patch(ctx, nodeRef("bench-1"), client.RawPatch(types.MergePatchType, []byte(patch)))
		}},
		{"unit-restart-annotation", func(i int) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, holdfastv1.AnnotationRestart,
				epoch0.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
			return c.Patch(ctx, unitRef(ns, "kiln-b"), client.RawPatch(types.MergePatchType, []byte(patch)))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			with := paced(b, b.N, tc.send)
			restore := unregister(b)
			without := paced(b, b.N, tc.send)
			restore()
			p50w, p99w := percentile(with, 50), percentile(with, 99)
			p50o, p99o := percentile(without, 50), percentile(without, 99)
			b.ReportMetric(ms(p50w), "p50-ms-registered")
			b.ReportMetric(ms(p99w), "p99-ms-registered")
			b.ReportMetric(ms(p50o), "p50-ms-unregistered")
			b.ReportMetric(ms(p99o), "p99-ms-unregistered")
			b.ReportMetric(ms(p50w-p50o), "p50-ms-added")
			b.ReportMetric(ms(p99w-p99o), "p99-ms-added")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// paced sends n requests at benchRate and returns each one's latency.
func paced(b *testing.B, n int, send func(int) error) []time.Duration {
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / benchRate)
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start := time.Now()
			if err := send(i); err != nil {
				errs <- err
			}
			lat[i] = time.Since(start)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("a benchmark request failed: %v", err)
	}
	return lat
}

func percentile(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

// unregister deletes the ValidatingWebhookConfiguration and returns what
// puts it back.
func unregister(b *testing.B) func() {
	ctx := context.Background()
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "holdfast-webhook"}, &vwc); err != nil {
		b.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &vwc); err != nil {
		b.Fatal(err)
	}
	waitForRegistration(b, false)
	return func() {
		vwc.ResourceVersion, vwc.UID, vwc.CreationTimestamp, vwc.ManagedFields, vwc.Generation = "", "", metaZeroTime, nil, 0
		if err := env.Client.Create(ctx, &vwc); err != nil {
			b.Fatal(err)
		}
		waitForRegistration(b, true)
	}
}

// waitForRegistration polls until the apiserver applies (or drops) the
// configuration: a desired-role change by the admin is refused exactly when
// the webhook is registered.
func waitForRegistration(b *testing.B, registered bool) {
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		patch := []byte(`{"metadata":{"labels":{"holdfast.io/desired-role":"agent"}}}`)
		err := env.Client.Patch(ctx, nodeRef("bench-1"), client.RawPatch(types.MergePatchType, patch), client.DryRunAll)
		if apierrors.IsForbidden(err) == registered {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the webhook registration did not become %v: %v", registered, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var metaZeroTime = metav1.Time{}

func nodeRef(name string) client.Object {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func unitRef(ns, name string) client.Object {
	return &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

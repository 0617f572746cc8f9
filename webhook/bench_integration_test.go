//go:build integration

package webhook_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/poll"
)

// benchRate is the offered load, 500/s unless HOLDFAST_BENCH_RATE says
// otherwise: requests start every 1/rate whatever the latency of the ones
// before (open loop), as kubectl users and components would send them.
var benchRate = func() int {
	if r, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_RATE")); err == nil && r > 0 {
		return r
	}
	return 500
}()

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
	// Spread over many objects, as node plugins write their own Nodes: 500
	// writes a second to one object would measure conflict retries instead.
	const objects = 50
	ns := env.Namespace(b)
	var units strings.Builder
	// Each Node's report is written by its own node plugin, as in a cluster.
	plugins := make([]client.Client, objects)
	for i := 0; i < objects; i++ {
		makeNode(b, fmt.Sprintf("bench-%d", i), nil, nil, true)
		pc := env.As(nodePluginUser, map[string][]string{serviceaccount.NodeNameKey: {fmt.Sprintf("bench-%d", i)}})
		pc.QPS, pc.Burst = -1, 0
		if plugins[i], err = client.New(pc, client.Options{Scheme: env.Scheme}); err != nil {
			b.Fatal(err)
		}
		units.WriteString(strings.Replace(unitYAML(ns, fmt.Sprintf("kiln-b%d", i), "    mode: Autonomy"), "apiVersion", "---\napiVersion", 1))
	}
	env.Kubectl().MustRun(b, units.String(), "apply", "-f", "-")

	for _, tc := range []struct {
		name string
		send func(i int) error
	}{
		{"node-holdfast-annotation", func(i int) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"fsyncP99Millis\":%d}"}}}`, holdfastv1.AnnotationFitness, i)
			return plugins[i%objects].Patch(ctx, nodeRef(fmt.Sprintf("bench-%d", i%objects)), client.RawPatch(types.MergePatchType, []byte(patch)))
		}},
		{"unit-restart-annotation", func(i int) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, holdfastv1.AnnotationRestart,
				epoch0.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
			return c.Patch(ctx, unitRef(ns, fmt.Sprintf("kiln-b%d", i%objects)), client.RawPatch(types.MergePatchType, []byte(patch)))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			with, failedWith := paced(b.N, tc.send)
			restore := unregister(b)
			without, failedWithout := paced(b.N, tc.send)
			restore()
			// Requests the apiserver failed (an overloaded machine times the
			// webhook call out) count in the latencies and are reported.
			b.ReportMetric(float64(failedWith), "failed-registered")
			b.ReportMetric(float64(failedWithout), "failed-unregistered")
			b.ReportMetric(float64(benchRate), "req/s")
			if failedWith+failedWithout > 0 {
				b.Logf("requests failed; the last run's first failure: %v", firstErr)
			}
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

// paced sends n requests at benchRate and returns each one's latency and
// how many failed.
func paced(n int, send func(int) error) ([]time.Duration, int) {
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(benchRate))
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
	if err, ok := <-errs; ok {
		firstErr = err
		return lat, len(errs) + 1
	}
	return lat, 0
}

// firstErr is the first failure of the last paced run, for the log.
var firstErr error

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
	b.Helper()
	patch := []byte(`{"metadata":{"labels":{"holdfast.io/desired-role":"agent"}}}`)
	poll.Until(b, 30*time.Second, fmt.Sprintf("the webhook registration to become %v", registered), func() (bool, string) {
		err := env.Client.Patch(context.Background(), nodeRef("bench-0"), client.RawPatch(types.MergePatchType, patch), client.DryRunAll)
		return apierrors.IsForbidden(err) == registered, fmt.Sprint(err)
	})
}

var metaZeroTime = metav1.Time{}

func nodeRef(name string) client.Object {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func unitRef(ns, name string) client.Object {
	return &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

//go:build integration

package webhook_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-io/holdfast/test/ports"
)

// The binary counts and times each answer on its /metrics: a Unit it
// admits and a node label it refuses, each by resource, operation, verdict
// and the refusal's reason, as the apiserver sent them.
func TestTheWebhookCountsAdmissionsOnItsMetrics(t *testing.T) {
	kilnCluster(t)
	metricsAddr := ports.Addr(t)
	p := startBinary(t, env.Webhooks.LocalServingCertDir, metricsAddr)
	refusedByTheNodeRule(t, p.ruleAnswers(t))
	ns := env.Namespace(t)
	allowed(t, env.Kubectl().Run(t, unitYAML(ns, "kiln-1", "    mode: Autonomy"), "create", "-f", "-"))

	got := scrape(t, metricsAddr)
	for series, want := range map[string]float64{
		`holdfast_webhook_admission_requests_total{allowed="false",operation="UPDATE",reason="Forbidden",resource="nodes"}`: 1,
		`holdfast_webhook_admission_requests_total{allowed="true",operation="CREATE",reason="",resource="units"}`:           1,
		`holdfast_webhook_admission_duration_seconds_count{resource="nodes"}`:                                               1,
		`holdfast_webhook_admission_duration_seconds_count{resource="units"}`:                                               1,
	} {
		v, ok := got[series]
		if !ok {
			t.Errorf("the webhook's /metrics has no %s", series)
		} else if v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	for series := range got {
		if strings.HasPrefix(series, "holdfast_webhook_admission_requests_total{") && strings.Contains(series, `resource="units"`) && strings.Contains(series, `allowed="false"`) {
			t.Errorf("the admitted Unit is counted as refused: %s", series)
		}
	}
}

// scrape reads every sample of the /metrics at addr, keyed by its series as
// the exposition writes it.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

package runtime_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
)

func gauge(t *testing.T, f *fixture, name, labels string) string {
	t.Helper()
	mfs, err := f.rt.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(ls, ",") != labels {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
			case m.GetCounter() != nil:
				return strconv.FormatFloat(m.GetCounter().GetValue(), 'g', -1, 64)
			case m.GetHistogram() != nil:
				return strconv.FormatFloat(float64(m.GetHistogram().GetSampleCount()), 'g', -1, 64)
			}
		}
	}
	return ""
}

// The metrics follow the lease: fenced, the state, the deadline, the
// driver, the scans and the writes.
func TestMetricsFollowTheLease(t *testing.T) {
	f := start(t, opts{})
	if got := gauge(t, f, "holdfast_runtime_fenced", ""); got != "1" {
		t.Fatalf("fenced before the grant = %q, want 1", got)
	}
	if got := gauge(t, f, "holdfast_runtime_lease_deadline_seconds", ""); got != "NaN" {
		t.Fatalf("lease deadline before the grant = %q, want NaN", got)
	}
	testutil.Eventually(t, 5*time.Second, "the driver connected", func() bool {
		return gauge(t, f, "holdfast_runtime_driver_connected", "driver=coupler-1") == "1"
	})
	grantHTTP(t, f.url, 1, 2*time.Second)
	f.tick(t)
	testutil.Eventually(t, 5*time.Second, "control writes counted", func() bool {
		return gauge(t, f, "holdfast_runtime_output_writes_total", "kind=control,result=written") != ""
	})
	if got := gauge(t, f, "holdfast_runtime_fenced", ""); got != "0" {
		t.Fatalf("fenced while held = %q", got)
	}
	if got := gauge(t, f, "holdfast_runtime_lease_state", "state="+string(leaseapi.Held)); got != "1" {
		t.Fatalf("lease_state{Held} = %q", got)
	}
	if got := gauge(t, f, "holdfast_runtime_lease_deadline_seconds", ""); got != "7" {
		t.Fatalf("lease deadline = %q, want 7 (10s lease, 2s acknowledged age, 1s scan)", got)
	}
	if got := gauge(t, f, "holdfast_runtime_lease_grants_total", "outcome=extended"); got != "1" {
		t.Fatalf("grants{extended} = %q", got)
	}
	if got := gauge(t, f, "holdfast_runtime_scan_duration_seconds", ""); got == "" || got == "0" {
		t.Fatalf("scan duration samples = %q", got)
	}
	if got := gauge(t, f, "holdfast_runtime_operating_point_total", "source=adopted"); got != "1" {
		t.Fatalf("operating_point{adopted} = %q", got)
	}
	f.clock.Step(leaseLength + holdfastv1.HoldBound(leaseLength))
	testutil.Eventually(t, 5*time.Second, "fenced = 1", func() bool {
		return gauge(t, f, "holdfast_runtime_fenced", "") == "1" &&
			gauge(t, f, "holdfast_runtime_lease_state", "state="+string(leaseapi.Fenced)) == "1"
	})
}

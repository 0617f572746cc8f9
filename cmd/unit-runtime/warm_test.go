package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/runtime/runtimetest"
	"github.com/holdfast-io/holdfast/test/devicesim"
	"github.com/holdfast-io/holdfast/test/leasetest"
)

// warmEpoch is the epoch the tests promote a warm runtime to; its lease
// certificate names that binding, as the grantor checks.
const warmEpoch = 3

// startWarm runs the real binary as a warm standby (--warm, no epoch)
// against sim with no owner-epoch block: the device takes every write, so
// only the runtime's own lease keeps it silent.
func startWarm(t *testing.T, sim *devicesim.Sim) *proc {
	t.Helper()
	p := runtimetest.Start(t, runtimetest.Build(t), runtimetest.Options{
		Unit: unit, Epoch: warmEpoch, Warm: true, LeaseDuration: leaseTime, PodUID: "uid-warm",
		Devices: []string{"coupler-1=modbus://" + sim.Addr() + "?timeout=1s"},
		Outputs: []string{fmt.Sprintf("counter=coupler-1:%d,step=1", counter), fmt.Sprintf("valve=coupler-1:%d,hold=0", valve)},
		Inputs:  []string{"level=coupler-1:200"},
	})
	return &proc{Process: p, t: t}
}

// grantBody is a grant of unit at epoch; anchor empty means a first grant
// (no acknowledged age, no anchor).
func grantBody(unit string, epoch int64, seq int, anchor leaseapi.Anchor) string {
	if anchor == "" {
		return fmt.Sprintf(`{"unit":%q,"epoch":%d,"durationMillis":%d,"grantor":"test-grantor","seq":%d}`,
			unit, epoch, leaseTime.Milliseconds(), seq)
	}
	return fmt.Sprintf(`{"unit":%q,"epoch":%d,"durationMillis":%d,"ackAgeMillis":0,"anchor":%q,"grantor":"test-grantor","seq":%d}`,
		unit, epoch, leaseTime.Milliseconds(), anchor, seq)
}

// scansPass waits until the warm runtime has read the device n more times:
// its scan runs and time passes on the device's side.
func scansPass(t *testing.T, sim *devicesim.Sim, n int) {
	t.Helper()
	from := sim.ReadsServed()
	eventually(t, 20*time.Second, fmt.Sprintf("%d more reads at the device", n), func() bool { return sim.ReadsServed() >= from+n })
}

// A warm standby (docs/design.md §3, Warm standby; issue 26) is the real
// binary started with --warm and no epoch, against a device that takes
// every write. It connects and reads while bound to no epoch, reports Warm
// and is ready, and nothing it does reaches the device as a write. Senders
// other than the authorised grantor (L12), and the grantor's grant for
// another unit, bind it to nothing. The grantor's first grant binds it to
// that grant's epoch and, carrying no anchor this runtime issued, extends
// nothing (L1): still no write. The second grant, echoing the first
// reply's anchor, extends the lease; the runtime then reads the operating
// point the device holds at that moment and writes from it (L10). From then
// on it is that epoch's runtime: a grant of the next epoch, or an earlier
// one, is refused with 409 (L7).
func TestAWarmRuntimeWritesNothingBeforeItsEpoch(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", Mode: devicesim.Plain})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	sim.SetRegister(counter, 1000)
	sim.SetRegister(valve, 55)
	sim.SetRegister(200, 7)

	p := startWarm(t, sim)
	if s, err := p.status(); err != nil || s.State != leaseapi.Warm || s.Epoch != 0 || !s.Fenced || s.RemainingMillis != nil {
		t.Fatalf("a warm runtime reports %+v (%v), want Warm at no epoch, writing nothing, never granted", s, err)
	}
	eventually(t, 10*time.Second, "the warm runtime to connect its device", func() bool {
		return p.metric(t, `holdfast_runtime_driver_connected{driver="coupler-1"}`) == "1"
	})
	scansPass(t, sim, 20)
	eventually(t, 10*time.Second, "the warm runtime to be ready", func() bool {
		return p.probe(t, holdfastv1.HealthServiceReadiness) == healthpb.HealthCheckResponse_SERVING
	})
	if got := p.probe(t, holdfastv1.HealthServiceLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of the warm runtime = %v", got)
	}
	if got := p.metric(t, `holdfast_runtime_lease_state{state="Warm"}`); got != "1" {
		t.Fatalf(`holdfast_runtime_lease_state{state="Warm"} = %q, want 1`, got)
	}
	noWrites := func(when string) {
		t.Helper()
		if w := sim.Writes(); len(w) != 0 {
			t.Fatalf("%s: %d writes reached the device, first %+v", when, len(w), w[0])
		}
	}
	noWrites("while warm")

	// Senders that are not the authorised grantor run the grantor's own
	// renewal loop at the runtime: refused, and nothing is bound.
	other := leasetlstest.NewCA(t, "another-ca")
	for _, tc := range []struct {
		name string
		g    *leasetest.Grantor
	}{
		{"a certificate of another CA", &leasetest.Grantor{URL: p.LeaseURL, TLS: &leasetlstest.Static{Cert: other.GrantorCertificate(t), Roots: p.CA.Roots}}},
		{"plain HTTP", &leasetest.Grantor{URL: strings.Replace(p.LeaseURL, "https://", "http://", 1)}},
	} {
		tc.g.Unit, tc.g.Epoch, tc.g.Duration, tc.g.Name = unit, warmEpoch, leaseTime, "bystander"
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tc.g.Run(ctx) }()
		eventually(t, 20*time.Second, tc.name+": three attempts", func() bool { return tc.g.Attempts() >= 3 })
		stop()
		<-done
		if tc.g.Acks() != 0 {
			t.Fatalf("%s: %d grants acknowledged", tc.name, tc.g.Acks())
		}
		if s, _ := p.status(); s.State != leaseapi.Warm || s.Epoch != 0 || s.LastGrantor != "" {
			t.Fatalf("%s: after its grants the runtime reports %+v, want Warm at no epoch", tc.name, s)
		}
	}
	// The authorised grantor's grant for another unit binds nothing either.
	grantor := p.CA.GrantorCertificate(t)
	if code, body := post(t, p, grantor, grantBody("plant/kiln-2", warmEpoch, 1, "")); code != http.StatusConflict {
		t.Fatalf("a grant for another unit answered %d %s, want 409", code, body)
	}
	if s, _ := p.status(); s.State != leaseapi.Warm || s.Epoch != 0 {
		t.Fatalf("after a grant for another unit the runtime reports %+v, want Warm at no epoch", s)
	}
	noWrites("after the refused grants")

	// The first grant binds the epoch and extends nothing.
	code, body := post(t, p, grantor, grantBody(unit, warmEpoch, 1, ""))
	var first leaseapi.Reply
	if err := json.Unmarshal([]byte(body), &first); code != http.StatusOK || err != nil {
		t.Fatalf("the grantor's first grant answered %d %s (%v), want 200", code, body, err)
	}
	if first.Epoch != warmEpoch || first.State != leaseapi.Ungranted || !first.Fenced || first.Anchor == "" {
		t.Fatalf("reply to the first grant %+v, want epoch %d, Ungranted, fenced, with an anchor", first, warmEpoch)
	}
	if s, _ := p.status(); s.Epoch != warmEpoch || s.State != leaseapi.Ungranted || s.RemainingMillis != nil {
		t.Fatalf("after the first grant the runtime reports %+v, want Ungranted at epoch %d, never granted", s, warmEpoch)
	}
	scansPass(t, sim, 20)
	noWrites("after the first grant")
	eventually(t, 10*time.Second, "the bound, ungranted runtime to be not ready", func() bool {
		return p.probe(t, holdfastv1.HealthServiceReadiness) == healthpb.HealthCheckResponse_NOT_SERVING
	})

	// The previous writer moves the operating point after the binding;
	// only a read after the lease is held sees it.
	sim.SetRegister(counter, 2000)
	sim.SetRegister(valve, 66)
	granted := time.Now()
	code, body = post(t, p, grantor, grantBody(unit, warmEpoch, 2, first.Anchor))
	var second leaseapi.Reply
	if err := json.Unmarshal([]byte(body), &second); code != http.StatusOK || err != nil || second.State != leaseapi.Held {
		t.Fatalf("the grantor's second grant answered %d %s (%v), want 200 Held", code, body, err)
	}
	eventually(t, 5*time.Second, "the promoted runtime to write", func() bool { return len(sim.Writes()) >= 4 })
	w := sim.Writes()
	if w[0].Time.Before(granted) {
		t.Fatalf("first write %+v before the lease-extending grant was sent at %v", w[0], granted)
	}
	if w[0].Register != counter || w[0].Value != 2001 || w[1].Register != valve || w[1].Value != 66 {
		t.Fatalf("first writes %+v, want the operating point read after the grant (counter 2001, valve 66)", w[:2])
	}

	// Bound for good: grants of other epochs are refused and bind nothing.
	for _, e := range []int64{warmEpoch + 1, warmEpoch - 1} {
		code, body := post(t, p, grantor, grantBody(unit, e, 10+int(e), ""))
		var c leaseapi.Conflict
		if err := json.Unmarshal([]byte(body), &c); code != http.StatusConflict || err != nil || c.RuntimeEpoch != warmEpoch || c.GrantEpoch != e {
			t.Fatalf("a grant of epoch %d at the runtime bound to %d answered %d %s, want 409 naming both", e, warmEpoch, code, body)
		}
	}
	if s, _ := p.status(); s.Epoch != warmEpoch || s.State != leaseapi.Held {
		t.Fatalf("after the refused grants the runtime reports %+v, want Held at epoch %d", s, warmEpoch)
	}
}

// The controller's own renewal loop (controller/grantor, through
// leasetest) promotes a warm runtime with no change: its first grant binds
// the epoch and is answered with an anchor, the next one echoes it and
// extends the lease, and the runtime writes from the operating point it
// reads then.
func TestTheGrantorsRenewalLoopPromotesAWarmRuntime(t *testing.T) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0", Mode: devicesim.Plain})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	sim.SetRegister(counter, 500)
	sim.SetRegister(valve, 9)
	p := startWarm(t, sim)
	scansPass(t, sim, 10)
	if w := sim.Writes(); len(w) != 0 {
		t.Fatalf("the warm runtime wrote %+v", w[0])
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	g := grantor(p, warmEpoch)
	go g.Run(ctx)
	eventually(t, 10*time.Second, "the promoted runtime to write", func() bool { return len(sim.Writes()) >= 4 })
	if w := sim.Writes(); w[0].Register != counter || w[0].Value != 501 || w[1].Register != valve || w[1].Value != 9 {
		t.Fatalf("first writes %+v, want the adopted operating point (counter 501, valve 9)", w[:2])
	}
	if s, _ := p.status(); s.Epoch != warmEpoch || s.State != leaseapi.Held || s.LastGrantor != g.Name {
		t.Fatalf("the promoted runtime reports %+v, want Held at epoch %d from %s", s, warmEpoch, g.Name)
	}
}

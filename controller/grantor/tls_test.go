package grantor

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	runtimelease "github.com/holdfast-io/holdfast/runtime/lease"
)

// testCA is the lease CA of this package's tests: every endpoint's
// certificate and the grantor's come from it.
func testCA(t testing.TB) *leasetlstest.CA { return leasetlstest.Shared(t) }

// testGrantor are the grantor's credentials from the test CA.
func testGrantor(t testing.TB) Credentials { return testCA(t).Grantor(t) }

// L12, the grantor's half: a grant goes only to an endpoint that proves to
// be the binding's runtime (a certificate of the lease CA naming the unit
// and the epoch). Anything else at the address (the runtime of another
// epoch or unit, a certificate of another CA, a plain-HTTP listener) is
// sent nothing; the attempt is Unreachable (no runtime answered), with
// why, and counted.
func TestTheGrantorSendsNothingToAnEndpointThatIsNotTheBindingsRuntime(t *testing.T) {
	other := leasetlstest.NewCA(t, "another-ca")
	for _, tc := range []struct {
		name   string
		serve  func(e *endpoint)
		reason string
		msg    string
	}{
		{name: "the runtime of another epoch", reason: authRuntimeUnverified, msg: "does not name holdfast://runtime/plant/kiln-1/e3",
			serve: func(e *endpoint) { e.srv = testCA(t).ServeRuntime(t, e.handler(), unit.String(), 2) }},
		{name: "the runtime of another unit", reason: authRuntimeUnverified, msg: "does not name holdfast://runtime/plant/kiln-1/e3",
			serve: func(e *endpoint) { e.srv = testCA(t).ServeRuntime(t, e.handler(), "plant/kiln-2", 3) }},
		{name: "a certificate of another CA", reason: authRuntimeUnverified, msg: "certificate signed by unknown authority",
			serve: func(e *endpoint) { e.srv = other.ServeRuntime(t, e.handler(), unit.String(), 3) }},
		{name: "plain HTTP", reason: authNotTLS, msg: "does not speak TLS",
			serve: func(e *endpoint) { *e = *newPlainEndpoint(t, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &endpoint{epoch: 3}
			tc.serve(e)
			before := promtest.ToFloat64(authFailures.WithLabelValues(tc.reason))
			g := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
			defer g.StopAll()
			g.Ensure(Target{Unit: unit, Epoch: 3, Address: e.addr(), Duration: 30 * time.Second})
			waitFor(t, "two attempts", func() bool { o, _ := g.Observe(unit); return o.Attempts >= 2 })
			obs, _ := g.Observe(unit)
			if obs.Acked() || obs.LastAttempt.Outcome != Unreachable || !strings.Contains(obs.LastAttempt.Message, tc.msg) ||
				!strings.Contains(obs.LastAttempt.Message, "no grant sent") {
				t.Fatalf("attempt %+v, want Unreachable saying %q and that no grant was sent", obs.LastAttempt, tc.msg)
			}
			if n := len(e.received()); n != 0 {
				t.Fatalf("%d grants reached an endpoint that is not the binding's runtime", n)
			}
			if got := promtest.ToFloat64(authFailures.WithLabelValues(tc.reason)) - before; got < 2 {
				t.Fatalf("%s counted %v times, want each attempt", tc.reason, got)
			}
		})
	}
}

// The runtime refusing the grantor's certificate (here: it trusts another
// CA for grantors) answered: Refused, saying so, and counted. Its lease is
// not extended.
func TestARuntimeRefusingTheGrantorsCertificateIsRefused(t *testing.T) {
	k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: unit.String(), Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: 10 * time.Second}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	other := leasetlstest.NewCA(t, "the-runtimes-grantor-ca")
	h := runtimelease.NewHandler(k, runtimelease.MutualTLS(func() *x509.CertPool { return other.Roots }, lease.GrantorIdentity), klog.Background())
	srv := testCA(t).ServeRuntime(t, h, unit.String(), 1)
	before := promtest.ToFloat64(authFailures.WithLabelValues(authRefusedByRuntime))
	g := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 1, Address: srv.Listener.Addr().String(), Duration: 10 * time.Second})
	waitFor(t, "two attempts", func() bool { o, _ := g.Observe(unit); return o.Attempts >= 2 })
	obs, _ := g.Observe(unit)
	if obs.LastAttempt.Outcome != Refused || !strings.Contains(obs.LastAttempt.Message, "the runtime refused this grantor's certificate") ||
		!strings.Contains(obs.LastAttempt.Message, "unknown authority") {
		t.Fatalf("attempt %+v, want Refused naming the certificate", obs.LastAttempt)
	}
	if promtest.ToFloat64(authFailures.WithLabelValues(authRefusedByRuntime))-before < 2 {
		t.Fatal("the runtime's refusals are not counted")
	}
	if st := k.Status(); st.State != lease.Ungranted || st.RemainingMillis != nil {
		t.Fatalf("a refused grantor extended the lease: %+v", st)
	}
}

// A loop speaks HTTP/2 over TLS, and closes its idle connections when the
// grantor's certificate changes, so the next grant shows the runtime the
// new one.
func TestANewGrantorCertificateIsPresentedWithoutARestart(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: unit.String(), Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: 10 * time.Second}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := runtimelease.NewHandler(k, runtimelease.MutualTLS(func() *x509.CertPool { return testCA(t).Roots }, lease.GrantorIdentity), klog.Background())
	srv := testCA(t).ServeRuntime(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && r.ProtoMajor == 2 {
			mu.Lock()
			seen = append(seen, r.TLS.PeerCertificates[0].SerialNumber.String())
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}), unit.String(), 1)
	creds := testCA(t).Grantor(t)
	var cmu sync.Mutex
	swap := &swapCreds{s: creds, mu: &cmu}
	g := New(Options{Name: "ctl-0", TLS: swap})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 1, Address: srv.Listener.Addr().String(), Duration: 10 * time.Second})
	waitFor(t, "the lease held", func() bool { o, _ := g.Observe(unit); return o.Acks >= 2 })
	next := testCA(t).GrantorCertificate(t)
	swap.set(next)
	waitFor(t, "a grant under the new certificate", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1] == next.Leaf.SerialNumber.String()
	})
}

type swapCreds struct {
	mu *sync.Mutex
	s  *leasetlstest.Static
}

func (c *swapCreds) ClientCertificate() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.Cert
}

func (c *swapCreds) RuntimeRoots() *x509.CertPool { return c.s.Roots }

func (c *swapCreds) set(cert *tls.Certificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s = &leasetlstest.Static{Cert: cert, Roots: c.s.Roots}
}

// L12 for a promoted warm pod: a binding that recorded a warm pod's UID is
// granted only by an endpoint proving that pod's warm identity. The warm
// identity of another UID, the epoch's identity (a pod created for the
// binding) and a warm identity offered to a binding that recorded no pod
// are each sent nothing. The real keeper of a warm runtime is bound by the
// first grant and held by the next.
func TestTheGrantorGrantsAPromotedWarmPodOnlyUnderTheRecordedUID(t *testing.T) {
	const uid = "6f1c0f8e-warm-a"
	t.Run("the recorded pod", func(t *testing.T) {
		k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: unit.String(), Warm: true, Mode: holdfastv1.Failover, LeaseDuration: 10 * time.Second}, klog.Background())
		if err != nil {
			t.Fatal(err)
		}
		h := runtimelease.NewHandler(k, runtimelease.MutualTLS(func() *x509.CertPool { return testCA(t).Roots }, lease.GrantorIdentity), klog.Background())
		srv := testCA(t).ServeWarmRuntime(t, h, unit.String(), uid)
		g := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
		defer g.StopAll()
		g.Ensure(Target{Unit: unit, Epoch: 3, PodUID: uid, Address: srv.Listener.Addr().String(), Duration: 10 * time.Second})
		waitFor(t, "the lease held", func() bool { o, _ := g.Observe(unit); return o.Acks >= 2 })
		if st := k.Status(); st.Epoch != 3 || st.State != lease.Held {
			t.Fatalf("the promoted warm runtime is %+v, want Held at epoch 3", st)
		}
	})
	for _, tc := range []struct {
		name   string
		podUID string // the binding's
		serve  func(e *endpoint)
		msg    string
	}{
		{name: "another warm pod of the unit", podUID: uid, msg: "does not name holdfast://runtime/plant/kiln-1/warm/" + uid,
			serve: func(e *endpoint) { e.srv = testCA(t).ServeWarmRuntime(t, e.handler(), unit.String(), "another-uid") }},
		{name: "the epoch's runtime", podUID: uid, msg: "does not name holdfast://runtime/plant/kiln-1/warm/" + uid,
			serve: func(e *endpoint) { e.srv = testCA(t).ServeRuntime(t, e.handler(), unit.String(), 3) }},
		{name: "a warm pod of another unit", podUID: uid, msg: "does not name holdfast://runtime/plant/kiln-1/warm/" + uid,
			serve: func(e *endpoint) { e.srv = testCA(t).ServeWarmRuntime(t, e.handler(), "plant/kiln-2", uid) }},
		{name: "a warm pod, for a binding that promoted none", podUID: "", msg: "does not name holdfast://runtime/plant/kiln-1/e3",
			serve: func(e *endpoint) { e.srv = testCA(t).ServeWarmRuntime(t, e.handler(), unit.String(), uid) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &endpoint{epoch: 3}
			tc.serve(e)
			g := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
			defer g.StopAll()
			g.Ensure(Target{Unit: unit, Epoch: 3, PodUID: tc.podUID, Address: e.addr(), Duration: 30 * time.Second})
			waitFor(t, "two attempts", func() bool { o, _ := g.Observe(unit); return o.Attempts >= 2 })
			obs, _ := g.Observe(unit)
			if obs.Acked() || obs.LastAttempt.Outcome != Unreachable || !strings.Contains(obs.LastAttempt.Message, tc.msg) {
				t.Fatalf("attempt %+v, want Unreachable saying %q", obs.LastAttempt, tc.msg)
			}
			if n := len(e.received()); n != 0 {
				t.Fatalf("%d grants reached an endpoint that is not the binding's runtime", n)
			}
		})
	}
}

// A loop made for one pod never grants another: Ensure at the same epoch
// naming another podUID replaces the loop, whose connection proved only the
// identity it was made for.
func TestALoopForAnotherPodAtTheSameEpochIsReplaced(t *testing.T) {
	a := &endpoint{epoch: 3}
	a.srv = testCA(t).ServeWarmRuntime(t, a.handler(), unit.String(), "uid-a")
	g := New(Options{Name: "ctl-0", TLS: testGrantor(t)})
	defer g.StopAll()
	g.Ensure(Target{Unit: unit, Epoch: 3, PodUID: "uid-a", Address: a.addr(), Duration: 30 * time.Second})
	waitFor(t, "an acknowledgement from pod a", func() bool { o, _ := g.Observe(unit); return o.Acks >= 1 })
	g.Ensure(Target{Unit: unit, Epoch: 3, PodUID: "uid-b", Address: a.addr(), Duration: 30 * time.Second})
	before := len(a.received())
	waitFor(t, "two attempts of the new loop", func() bool { o, _ := g.Observe(unit); return o.Attempts >= 2 })
	obs, _ := g.Observe(unit)
	if obs.Target.PodUID != "uid-b" || obs.Acked() || obs.LastAttempt.Outcome != Unreachable {
		t.Fatalf("observation %+v, want a new loop for uid-b that reached nobody", obs)
	}
	if n := len(a.received()) - before; n > 1 {
		// One grant of the old loop may have been in flight at the swap.
		t.Fatalf("%d grants reached pod a after the binding named pod b", n)
	}
}

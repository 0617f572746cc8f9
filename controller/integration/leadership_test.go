//go:build integration

package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/poll"
)

func electionLease(t testing.TB, id string) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: electionNamespace, Name: id}, &l); err != nil {
		return nil
	}
	return &l
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestADeliberateStopReleasesTheGrantorLeaseAtOnce: a stop asked for hands
// the leadership back (ReleaseOnCancel through the gate) and ends without a
// stand-down.
func TestADeliberateStopReleasesTheGrantorLeaseAtOnce(t *testing.T) {
	id := "grantor-release"
	c := startController(t, controllerOptions{identity: "ctl-release", electionID: id, standDown: 90 * time.Second})
	poll.Until(t, 30*time.Second, "leadership", func() (bool, string) {
		h := holder(electionLease(t, id))
		return strings.HasPrefix(h, "ctl-release_"), h
	})
	start := time.Now()
	c.stop()
	if c.ending != leadership.Released || c.err != nil {
		t.Fatalf("a deliberate stop ended %s, %v; want Released", c.ending, c.err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("a deliberate stop took %v: it must not stand down", took)
	}
	if h := holder(electionLease(t, id)); h != "" {
		t.Fatalf("the election Lease is still held by %q after a deliberate stop", h)
	}
	for _, l := range c.auditLines(t) {
		if l.Reason == "GrantorStandingDown" {
			t.Fatal("a deliberate stop was audited as a stand-down")
		}
	}
}

// connCounter accepts connections on loopback and answers nothing: an
// endpoint nobody serves, so every renewal attempt is Unreachable but
// visible as a connection.
type connCounter struct {
	l     net.Listener
	count atomic.Int64
}

func newConnCounter(t testing.TB) *connCounter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connCounter{l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.count.Add(1)
			go func() { _, _ = io.Copy(io.Discard, conn) }()
			go func() { time.Sleep(100 * time.Millisecond); conn.Close() }() // the endpoint's behaviour: answer nothing, then hang up
		}
	}()
	t.Cleanup(func() { l.Close() })
	return c
}

func (c *connCounter) port() int32 { return int32(c.l.Addr().(*net.TCPAddr).Port) }

// TestALostLeadershipStandsDownRenewingWhatItHolds: a grantor whose election
// Lease is taken from it while the apiserver is up goes on renewing the
// runtimes it holds for the stand-down, keeps /healthz answering, never
// hands the Lease over (the gate), then stops renewing.
func TestALostLeadershipStandsDownRenewingWhatItHolds(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	id := "grantor-lost"
	node(t, "lost-edge-1", map[string]string{"holdfast.io/device": "kiln-9"})
	node(t, "lost-standby-1", nil)
	endpoint := newConnCounter(t)
	// The stand-down counts from the last renewal of the leadership (L6):
	// the loss is noticed up to the renew deadline (4s) later, so 20s
	// leaves a stand-down long enough to watch.
	c := startController(t, controllerOptions{namespace: ns, identity: "ctl-lost", electionID: id, standDown: 20 * time.Second})
	poll.Until(t, 30*time.Second, "leadership", func() (bool, string) {
		h := holder(electionLease(t, id))
		return strings.HasPrefix(h, "ctl-lost_"), h
	})

	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-9"},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev", LeasePort: endpoint.port(), HealthPort: endpoint.port() + 1},
			NodeSelector: map[string]string{"holdfast.io/device": "kiln-9"},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30, RuntimeStartupGraceSeconds: 120,
				Targets: &holdfastv1.FailoverTargets{Nodes: []string{"lost-standby-1"}}},
		},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "kiln-9"}
	e1 := waitNewEpoch(t, key, 0)
	poll.Until(t, 20*time.Second, "the first runtime pod", func() (bool, string) { return runtimePod(t, u, e1) != nil, "" })
	schedule(t, key, e1, "lost-edge-1")
	kubeletReports(t, ns, units.PodName("kiln-9", e1), "127.0.0.1", false, 0)
	poll.Until(t, 20*time.Second, "renewal attempts", func() (bool, string) { return endpoint.count.Load() >= 2, "" })

	// Another process takes the Lease; this one's renewals fail and its
	// manager stops without being asked.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := electionLease(t, id)
		l.Spec.HolderIdentity = ptr.To("thief")
		l.Spec.LeaseDurationSeconds = ptr.To(int32(3600))
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return env.Client.Update(ctx, l)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the stand-down", func() (bool, string) {
		for _, l := range c.auditLines(t) {
			if l.Reason == "GrantorStandingDown" && strings.Contains(l.Message, ns+"/kiln-9") {
				return true, ""
			}
		}
		return false, "no GrantorStandingDown line"
	})
	during := endpoint.count.Load()
	poll.Until(t, 5*time.Second, "renewals during the stand-down", func() (bool, string) { return endpoint.count.Load() >= during+2, "" })
	resp, err := http.Get("http://" + c.health + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz must answer during the stand-down: %v %v", resp, err)
	}
	resp.Body.Close()
	if h := holder(electionLease(t, id)); h != "thief" {
		t.Fatalf("the Lease holder is %q: a process standing down must not touch it", h)
	}

	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stand-down did not end")
	}
	if c.ending != leadership.StoodDown {
		t.Fatalf("ended %s (%v), want StoodDown", c.ending, c.err)
	}
	after := endpoint.count.Load()
	time.Sleep(2 * time.Second) // an absence of renewals: only a window can show it
	if n := endpoint.count.Load(); n != after {
		t.Fatalf("%d renewal attempts after the stand-down ended", n-after)
	}
	if h := holder(electionLease(t, id)); h != "thief" {
		t.Fatalf("the Lease holder is %q after the stand-down", h)
	}
}

package grantor_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// BenchmarkRenewalSkew is the grantor's renewal skew at scale: one Grantor,
// as the units role builds it (a name, a real clock, a Notify, mutual TLS), renewing 500
// and 2000 runtimes' lease endpoints, each the runtime's own lease server
// (lease.Keeper running, lease.NewHandler, lease.Listen) on loopback in this
// process, with the Unit's default 30s lease (a renewal every 5s per unit:
// 100 and 400 renewals a second).
//
// Skew is when a renewal reached the runtime's handler minus when the
// grantor's loop had planned it. The plan is the loop's own: it computes
// planned = now + wait and arms a timer for wait; the benchmark's clock
// records, per goroutine, the last Now it handed out and the wait of the
// timer armed after it, so the due instant is exactly the loop's. A loop
// runs in one goroutine, which Notify names on the first acknowledgement.
// Renewals sent with no timer before them (the first, and the second that
// sends the anchor back at once) are not scheduled and are not counted.
//
// Each iteration is one lease (30s) of steady renewal after every unit holds
// an anchor; run with -benchtime=Nx. Reports p50, p99 and max skew in
// milliseconds, the least lease any runtime had left when a renewal reached
// it, the attempts not acknowledged, and the process's CPU time per attempt
// (both ends: the one figure a loaded machine does not distort much); fails
// if any runtime is not Held at the end.
func BenchmarkRenewalSkew(b *testing.B) {
	for _, n := range []int{500, 2000} {
		b.Run(fmt.Sprintf("units=%d", n), func(b *testing.B) { benchRenewalSkew(b, n) })
	}
}

const benchLease = 30 * time.Second

func benchRenewalSkew(b *testing.B, n int) {
	klog.SetLogger(logr.Discard()) // 2000 loops each log their start
	defer klog.ClearLogger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	clk := &planClock{lastNow: map[uint64]time.Time{}, due: map[uint64]time.Time{}, sent: map[uint64]time.Time{}}
	var (
		mu        sync.Mutex
		loopOf    = map[string]uint64{} // unit -> the goroutine of its renewal loop
		sampling  bool
		skews     []time.Duration
		wakes     []time.Duration // due -> the loop stamped its grant
		dues      []time.Time     // when each measured renewal was planned
		leastRem  = benchLease
		unplanned int
	)
	// The lease channel as the units role runs it: mutual TLS, HTTP/2.
	ca := leasetlstest.NewCA(b, "bench-lease-ca")
	auth := lease.MutualTLS(func() *x509.CertPool { return ca.Roots }, leaseapi.GrantorIdentity)
	g := grantor.New(grantor.Options{Name: "bench-grantor", Clock: clk, TLS: ca.Grantor(b), Notify: func(u types.NamespacedName) {
		id := goid()
		mu.Lock()
		loopOf[u.String()] = id
		mu.Unlock()
	}})
	defer g.StopAll()

	keepers := make([]*lease.Keeper, n)
	log := klog.Background().V(10)
	for i := range n {
		unit := fmt.Sprintf("bench/u-%d", i)
		k, err := lease.NewKeeper(lease.Config{Unit: unit, Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: benchLease,
			Incarnation: holdfastv1.RuntimeIncarnation{PodUID: fmt.Sprintf("uid-%d", i)}}, log)
		if err != nil {
			b.Fatal(err)
		}
		go k.Run(ctx)
		keepers[i] = k
		h := lease.NewHandler(k, auth, log)
		cert := ca.RuntimeCertificate(b, unit, 1)
		srv, err := lease.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrival := time.Now() // the handler's own arrival is read next
			if r.Method == http.MethodPost {
				rem, granted := k.Remaining()
				mu.Lock()
				id, known := loopOf[unit]
				mu.Unlock()
				var due, sent time.Time
				planned := false
				if known {
					due, sent, planned = clk.take(id)
				}
				mu.Lock()
				if sampling {
					if planned {
						skews = append(skews, arrival.Sub(due))
						wakes = append(wakes, sent.Sub(due))
						dues = append(dues, due)
						if granted {
							leastRem = min(leastRem, rem)
						}
					} else {
						unplanned++
					}
				}
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		}), leasetls.ServerConfig(func() *tls.Certificate { return cert }), log)
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		g.Ensure(grantor.Target{Unit: types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("u-%d", i)}, Epoch: 1,
			Address: srv.Addr().String(), Duration: benchLease})
	}

	// Steady state: every runtime holds an anchor from this grantor.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		anchored := 0
		for i := range n {
			if o, ok := g.Observe(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("u-%d", i)}); ok && !o.Anchor.IsZero() {
				anchored++
			}
		}
		if anchored == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runtimes hold an anchor after 2 minutes", anchored, n)
		}
		time.Sleep(100 * time.Millisecond)
	}

	counts := func() (attempts, acks int64) {
		for i := range n {
			o, _ := g.Observe(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("u-%d", i)})
			attempts, acks = attempts+o.Attempts, acks+o.Acks
		}
		return attempts, acks
	}
	attempts0, acks0 := counts()
	cpu0, load0 := cpuTime(b), loadAverage()
	b.ResetTimer()
	mu.Lock()
	sampling = true
	mu.Unlock()
	for range b.N {
		time.Sleep(benchLease) // one lease period is the benchmark's unit of work
	}
	mu.Lock()
	sampling = false
	got, woke, planned := slices.Clone(skews), slices.Clone(wakes), slices.Clone(dues)
	least, unsched := leastRem, unplanned
	mu.Unlock()
	b.StopTimer()

	cpu := cpuTime(b) - cpu0
	attempts1, acks1 := counts()
	unacked := (attempts1 - attempts0) - (acks1 - acks0)
	notHeld := 0
	for i := range n {
		if st := keepers[i].State(); st != leaseapi.Held {
			notHeld++
			b.Logf("bench/u-%d: runtime %s, want Held", i, st)
		}
	}
	if len(got) == 0 {
		b.Fatal("no planned renewal was measured")
	}
	slices.Sort(got)
	slices.Sort(woke)
	at := func(s []time.Duration, q float64) float64 {
		return float64(s[int(q*float64(len(s)-1))]) / float64(time.Millisecond)
	}
	p := func(q float64) float64 { return at(got, q) }
	b.ReportMetric(p(0.50), "ms-p50")
	b.ReportMetric(p(0.99), "ms-p99")
	b.ReportMetric(p(1), "ms-max")
	b.ReportMetric(float64(len(got)), "renewals")
	b.ReportMetric(float64(unacked), "unacknowledged")
	b.ReportMetric(float64(cpu.Microseconds())/float64(attempts1-attempts0), "cpu-µs/renewal")
	b.ReportMetric(least.Seconds(), "s-least-remaining")
	// Burstiness: the most renewals planned in one 100 ms bin of the window
	// against the mean. Loops renewing in step show as a peak many times the
	// mean; spread phases as a peak near it.
	bins := map[int64]int{}
	for _, d := range planned {
		bins[d.UnixMilli()/100]++
	}
	peak := 0
	for _, c := range bins {
		peak = max(peak, c)
	}
	peakRatio := float64(peak) / (float64(len(planned)) / float64(len(bins)))
	b.ReportMetric(peakRatio, "peak/mean-per-100ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d units, %d planned renewals over %d x %v (%d unplanned): skew p50 %.2fms p90 %.2fms p99 %.2fms p99.9 %.2fms max %.2fms; "+
		"of which the loop's wake (due to grant stamped) p50 %.2fms p99 %.2fms max %.2fms; least lease left at a renewal %.2fs; "+
		"most renewals planned in one 100 ms bin %d (%.1f x the mean)",
		n, len(got), b.N, benchLease, unsched, p(0.5), p(0.9), p(0.99), p(0.999), p(1), at(woke, 0.5), at(woke, 0.99), at(woke, 1), least.Seconds(),
		peak, peakRatio)
	b.Logf("attempts not acknowledged in the window (timed out or refused): %d of %d; CPU of this process (grantor and runtimes) %.1fs, %.0fµs per attempt; load average %s at the start, %s at the end",
		unacked, attempts1-attempts0, cpu.Seconds(), float64(cpu.Microseconds())/float64(attempts1-attempts0), load0, loadAverage())
	// Every unit renews about every lease/6 (the interval runs from the
	// acknowledgement, so a loaded machine stretches it): at least two
	// thirds of that must have been measured, or the attribution failed.
	if want := n * b.N * int(leaseapi.CadenceDivisor) * 2 / 3; len(got) < want {
		b.Errorf("%d planned renewals measured, want at least %d", len(got), want)
	}
	if notHeld > 0 {
		b.Errorf("%d of %d runtimes not Held at the end: the grantor let a healthy runtime's lease run out", notHeld, n)
	}
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is /proc/loadavg's first three fields, "" where there is none.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// planClock is the real clock, remembering for each goroutine the last Now
// it handed out and the instant a timer armed after it is due.
type planClock struct {
	clock.RealClock
	mu      sync.Mutex
	lastNow map[uint64]time.Time
	due     map[uint64]time.Time
	// sent is the first Now after the timer was armed: the loop woke and
	// stamped its grant (Book.Stamp reads the clock just before the POST).
	sent map[uint64]time.Time
}

func (c *planClock) Now() time.Time {
	t := time.Now()
	id := goid()
	c.mu.Lock()
	c.lastNow[id] = t
	if _, armed := c.due[id]; armed {
		if _, ok := c.sent[id]; !ok {
			c.sent[id] = t
		}
	}
	c.mu.Unlock()
	return t
}

func (c *planClock) NewTimer(d time.Duration) clock.Timer {
	id := goid()
	c.mu.Lock()
	if last, ok := c.lastNow[id]; ok {
		c.due[id] = last.Add(d)
		delete(c.sent, id)
	}
	c.mu.Unlock()
	return c.RealClock.NewTimer(d)
}

// take returns and forgets the due instant of the timer goroutine id armed
// last, and when the goroutine stamped the grant that followed it.
func (c *planClock) take(id uint64) (due, sent time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	due, ok = c.due[id]
	sent = c.sent[id]
	delete(c.due, id)
	delete(c.sent, id)
	return due, sent, ok && !sent.IsZero()
}

// goid is the calling goroutine's id, from its stack header
// ("goroutine 123 [running]:").
func goid() uint64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.ParseUint(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

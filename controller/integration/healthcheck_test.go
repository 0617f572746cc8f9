//go:build integration

package integration

import (
	"context"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/policy"
)

// silentRelay forwards TCP to the apiserver until it goes silent: from then
// on it swallows every byte both ways on the connections it holds, closing
// none, which is what a peer that lost power looks like; new connections
// are relayed normally.
type silentRelay struct {
	l        net.Listener
	target   string
	accepted atomic.Int32
	silent   atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newSilentRelay(t *testing.T, target string) *silentRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &silentRelay{l: l, target: target}
	go r.accept()
	t.Cleanup(func() {
		l.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
	})
	return r
}

func (r *silentRelay) accept() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.accepted.Add(1)
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		// A connection accepted after the silence is relayed; one held
		// from before goes black.
		silent := &atomic.Bool{}
		go r.pipe(c, up, silent)
		go r.pipe(up, c, silent)
		go func() {
			for !r.silent.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			silent.Store(true)
		}()
	}
}

func (r *silentRelay) pipe(dst, src net.Conn, silent *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// silence makes every connection held now go black, and relays the ones
// that come after.
func (r *silentRelay) silence() {
	r.silent.Store(true)
	time.Sleep(50 * time.Millisecond) // long enough for each relay goroutine (10ms reads) to see it
	r.silent.Store(false)
}

func (r *silentRelay) client(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + r.l.Addr().String()
	// A dialer of its own: a transport of its own, built now with the
	// environment as it is now (client-go caches transports otherwise).
	cfg.Dial = (&net.Dialer{}).DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func keepEnv(t *testing.T, names ...string) {
	for _, n := range names {
		v, ok := os.LookupEnv(n)
		t.Cleanup(func() {
			if ok {
				os.Setenv(n, v)
			} else {
				os.Unsetenv(n)
			}
		})
	}
}

// TestAPIServerHealthCheck_ADeadConnectionIsGivenUpInsideTheWindow is the
// mechanism the grantor gap's detection term stands on: with the units
// role's health check (2s read-idle, 2s ping) a connection to an apiserver
// that went silent without closing is given up and dialled again within a
// few seconds; under client-go's defaults the same connection is kept for
// the whole window (it would be 45s), which proves the environment moved it.
func TestAPIServerHealthCheck_ADeadConnectionIsGivenUpInsideTheWindow(t *testing.T) {
	keepEnv(t, "HTTP2_READ_IDLE_TIMEOUT_SECONDS", "HTTP2_PING_TIMEOUT_SECONDS")
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	window := 12 * time.Second // three times the nominal 4s

	d := policy.DefaultGrantorTimings()
	if err := leadership.SetAPIServerHealthCheck(d.ReadIdleTimeout, d.PingTimeout); err != nil {
		t.Fatal(err)
	}
	tuned := newSilentRelay(t, u.Host)
	cs := tuned.client(t)
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	tuned.silence()
	silencedAt := time.Now()
	redialled := false
	for time.Since(silencedAt) < window {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1GetOptions)
		cancel()
		if err == nil && tuned.accepted.Load() >= 2 {
			redialled = true
			break
		}
	}
	if !redialled {
		t.Fatalf("the dead connection was not given up within %v (connections dialled: %d)", window, tuned.accepted.Load())
	}
	t.Logf("re-dialled and answered %v after the apiserver went silent", time.Since(silencedAt).Round(10*time.Millisecond))

	// Control: client-go's defaults keep the dead connection.
	os.Unsetenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS")
	os.Unsetenv("HTTP2_PING_TIMEOUT_SECONDS")
	control := newSilentRelay(t, u.Host)
	cs = control.client(t)
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	control.silence()
	silencedAt = time.Now()
	for time.Since(silencedAt) < 8*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = cs.CoreV1().Namespaces().Get(ctx, "default", metav1GetOptions)
		cancel()
	}
	if n := control.accepted.Load(); n != 1 {
		t.Fatalf("under client-go's defaults the connection was re-dialled within 8s (%d connections): the control does not control", n)
	}
}

var metav1GetOptions = metav1.GetOptions{}

//go:build integration

package nodeplugin_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/prestage"
	"github.com/holdfast-io/holdfast/test/crihost"
)

// requestLog records the repositories a registry was asked for.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.paths = append(l.paths, r.Method+" "+r.URL.Path)
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *requestLog) asked(repo string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.paths {
		if strings.Contains(p, "/v2/"+repo+"/") {
			return true
		}
	}
	return false
}

// TestPrestagePullsRuntimeImagesOfUnitsTargetingThisNode: through the CRI
// image service of the real containerd, from a registry on loopback, the
// node pulls the runtime image of every unit naming it as a failover target
// (by name or by selector) and of no other unit.
func TestPrestagePullsRuntimeImagesOfUnitsTargetingThisNode(t *testing.T) {
	r := newRig(t)
	reqs := &requestLog{}
	// Quiet: the failed pull of the unpublished image is retried many times.
	srv := httptest.NewServer(reqs.wrap(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	t.Cleanup(srv.Close)
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	if err := r.host.TrustPlainHTTP(hostPort); err != nil {
		t.Fatal(err)
	}
	bin, err := crihost.TestImageBinary()
	if err != nil {
		t.Fatal(err)
	}
	img, err := crihost.Image(bin, []string{"lease"})
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"plant/named", "plant/selected", "plant/elsewhere"} {
		ref, err := name.ParseReference(hostPort+"/"+repo+":v1", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	reqs.mu.Lock()
	reqs.paths = nil
	reqs.mu.Unlock()

	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "p1", Labels: map[string]string{"site": "north"}}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })
	mk := func(unit, repo string, targets holdfastv1.FailoverTargets) {
		u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: unit},
			Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: hostPort + "/" + repo + ":v1"},
				NodeSelector: map[string]string{"holdfast.io/device": unit},
				Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 10,
					RuntimeStartupGraceSeconds: 120, Targets: &targets}}}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	mk("named", "plant/named", holdfastv1.FailoverTargets{Nodes: []string{"p0", "p1"}})
	mk("selected", "plant/selected", holdfastv1.FailoverTargets{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "north"}}})
	mk("elsewhere", "plant/elsewhere", holdfastv1.FailoverTargets{Nodes: []string{"p2"},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "south"}}})
	// A target whose image the registry does not hold: its pull fails.
	mk("unpublished", "plant/unpublished", holdfastv1.FailoverTargets{Nodes: []string{"p1"}})
	pulls := func(result string) float64 {
		return counter(t, "holdfast_node_image_pulls_total", map[string]string{"result": result})
	}
	pulled, failed := pulls("pulled"), pulls("failed")

	images, err := r.host.ImageService(ctx)
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, func(mgr ctrl.Manager) error {
		return (&prestage.Reconciler{Client: mgr.GetClient(), NodeName: "p1", Images: images}).SetupWithManager(mgr)
	})
	present := func(repo string) bool {
		st, err := images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: hostPort + "/" + repo + ":v1"}, false)
		return err == nil && st.Image != nil
	}
	waitFor(t, "named target's image staged", func() bool { return present("plant/named") })
	waitFor(t, "selector target's image staged", func() bool { return present("plant/selected") })
	// Every unit was reconciled at start; give the third its turn.
	time.Sleep(time.Second) // an absence of a pull: only a window can show it
	if present("plant/elsewhere") || reqs.asked("plant/elsewhere") {
		t.Fatal("the image of a unit that does not target this node was pulled")
	}
	// holdfast_node_image_pulls_total: the two pulls, and the failed one.
	waitFor(t, "both pulls counted", func() bool { return pulls("pulled")-pulled >= 2 })
	if d := pulls("pulled") - pulled; d != 2 {
		t.Errorf("holdfast_node_image_pulls_total{result=pulled} rose by %v, want 2", d)
	}
	waitFor(t, "the unpublished image's failed pull counted", func() bool { return pulls("failed") > failed })
	if present("plant/unpublished") {
		t.Fatal("an image the registry does not hold is present")
	}
}

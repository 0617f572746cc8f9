//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// L12 on real kubelets: the runtime pod's kubelet got the pod's lease
// certificate from the holdfast.io/lease signer and the CA bundle from the
// ClusterTrustBundle, the grantor renews over mutual TLS, and a process on
// the plant network that sends the runtime a well-formed grant in plain HTTP
// is refused (403 Unauthenticated), extends nothing, and is counted.
func TestABystanderOnThePlantNetworkCannotGrant(t *testing.T) {
	d := newDrill(t, "bystander", 10)
	b, err := d.u.WaitHeld(d.ctx, 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://%s:", world.Nodes[b.Node].IP)
	metrics := base + "9441/metrics"
	refused := func() float64 {
		n, err := scrape(world.HTTPClient(), metrics, "holdfast_runtime_lease_grants_unauthenticated_total", map[string]string{"reason": leasetls.Plaintext})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	expiry, err := scrape(world.HTTPClient(), metrics, "holdfast_runtime_lease_certificate_expiry_timestamp_seconds", nil)
	if err != nil || time.Until(time.Unix(int64(expiry), 0)) < 20*time.Hour {
		t.Fatalf("the runtime's lease certificate expires at %v (%v), want the signer's day", time.Unix(int64(expiry), 0), err)
	}
	before := refused()
	code, answer, err := d.u.BystanderGrant(d.ctx, b.Node, 1)
	if err != nil {
		t.Fatal(err)
	}
	var e lease.Error
	if code != http.StatusForbidden || json.Unmarshal([]byte(answer), &e) != nil || e.Reason != lease.ReasonUnauthenticated {
		t.Fatalf("a bystander's grant answered %d %s, want 403 %s", code, answer, lease.ReasonUnauthenticated)
	}
	if got := refused() - before; got != 1 {
		t.Fatalf("the refusal was counted %v times", got)
	}
	st, err := leaseStatus(world.HTTPClient(), base+"9443"+lease.Path)
	if err != nil || st.State != lease.Held || st.LastGrantor == "bystander" || *st.RemainingMillis > 10_000 {
		t.Fatalf("after the bystander's grant the runtime reports %+v (%v), want Held from the grantor within the 10s lease", st, err)
	}
}

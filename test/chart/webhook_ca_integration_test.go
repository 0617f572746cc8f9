//go:build integration

package chart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"testing"

	"helm.sh/helm/v3/pkg/action"
)

// With webhook.tls.mode generate, every render against the cluster (helm
// upgrade, helm template --dry-run=server, a GitOps tool that renders with
// lookup) reuses the CA and serving certificate of the installed Secret: a
// new CA per render would leave the apiserver trusting a CA the running
// webhook pods do not serve, and every guarded change (runtime pod creation
// and binding among them) would fail closed until they restart.
func TestTheWebhookCAIsStableAcrossRenders(t *testing.T) {
	ch, cfg := installChart(t)
	secret, vwcCA := webhookTLS(t)
	if string(secret.Data["ca.crt"]) != string(vwcCA) {
		t.Fatalf("installed: the configuration trusts another CA than the Secret's ca.crt")
	}
	// Rendered manifests carry both base64-encoded.
	installedCA, installedCrt := base64.StdEncoding.EncodeToString(vwcCA), base64.StdEncoding.EncodeToString(secret.Data["tls.crt"])
	checkServingCert(t, secret.Data["ca.crt"], secret.Data["tls.crt"])

	for i := range 2 {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.DryRun, up.DryRunOption = Namespace, true, "server"
		rel, err := up.Run("holdfast", ch, map[string]any{"logVerbosity": i + 1})
		if err != nil {
			t.Fatalf("render %d (helm upgrade --dry-run=server): %v", i+1, err)
		}
		ms, err := Split(rel.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		var crt, ca string
		var bundles []string
		for _, m := range ms {
			switch {
			case m.Kind == "Secret" && m.Name == "holdfast-webhook-tls":
				data, _ := m.Object["data"].(map[string]any)
				crt, _ = data["tls.crt"].(string)
				ca, _ = data["ca.crt"].(string)
			case m.Kind == "ValidatingWebhookConfiguration":
				hooks, _ := m.Object["webhooks"].([]any)
				for _, h := range hooks {
					cc, _ := h.(map[string]any)["clientConfig"].(map[string]any)
					b, _ := cc["caBundle"].(string)
					bundles = append(bundles, b)
				}
			}
		}
		if ca != installedCA || crt != installedCrt {
			t.Errorf("render %d: the webhook Secret's CA or certificate differs from the installed one", i+1)
		}
		if len(bundles) == 0 {
			t.Fatalf("render %d: no webhook in the configuration", i+1)
		}
		for j, b := range bundles {
			if b != installedCA {
				t.Errorf("render %d: webhook %d trusts another CA than the installed one", i+1, j)
			}
		}
	}
}

// checkServingCert checks that crt is signed by ca and names the webhook
// Service.
func checkServingCert(t *testing.T, caPEM, crtPEM []byte) {
	t.Helper()
	parse := func(what string, data []byte) *x509.Certificate {
		b, _ := pem.Decode(data)
		if b == nil {
			t.Fatalf("%s: no PEM block", what)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return c
	}
	ca, crt := parse("ca.crt", caPEM), parse("tls.crt", crtPEM)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: "holdfast-webhook." + Namespace + ".svc"}); err != nil {
		t.Errorf("the webhook's serving certificate: %v", err)
	}
}

//go:build integration

package chart

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
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
		crt, ca, bundles := renderWebhookTLS(t, cfg, ch, map[string]any{"logVerbosity": i + 1})
		if ca != installedCA || crt != installedCrt {
			t.Errorf("render %d: the webhook Secret's CA or certificate differs from the installed one", i+1)
		}
		for j, b := range bundles {
			if b != installedCA {
				t.Errorf("render %d: webhook %d trusts another CA than the installed one", i+1, j)
			}
		}
	}
}

// The self-signed rotation of docs/operations.md#webhook-certificate, as the
// chart renders it: with the Secret's ca.crt holding the old and the new CA
// (step 1) helm upgrade keeps the served pair and makes every webhook trust
// both; with the new pair and the new CA alone (step 3) it trusts the new
// CA alone and keeps the new pair. No render makes a pair of its own.
func TestTheWebhookRotationStepsRenderFromTheSecret(t *testing.T) {
	ctx := context.Background()
	ch, cfg := installChart(t)
	secret, _ := webhookTLS(t)
	oldCA := secret.Data["ca.crt"]
	newCA := leasetlstest.NewCA(t, "holdfast-webhook-ca-2")
	svc := "holdfast-webhook." + Namespace + ".svc"
	now := time.Now()
	newPair := newCA.KeyPairFiles(t, &x509.Certificate{Subject: pkix.Name{CommonName: svc}, DNSNames: []string{svc, svc + ".cluster.local"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	for _, step := range []struct {
		name     string
		crt, key []byte
		ca       []byte
		wantCrt  []byte
	}{
		{"1. trust both", secret.Data["tls.crt"], secret.Data["tls.key"], append(append([]byte{}, oldCA...), newCA.CertPEM...), secret.Data["tls.crt"]},
		{"3. retire the old CA", newPair["tls.crt"], newPair["tls.key"], newCA.CertPEM, newPair["tls.crt"]},
	} {
		cur := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), cur); err != nil {
			t.Fatal(err)
		}
		cur.Data = map[string][]byte{"tls.crt": step.crt, "tls.key": step.key, "ca.crt": step.ca}
		if err := env.Client.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		crt, ca, bundles := renderWebhookTLS(t, cfg, ch, map[string]any{})
		if crt != b64(step.wantCrt) {
			t.Errorf("%s: helm upgrade renders another serving certificate than the Secret's", step.name)
		}
		if ca != b64(step.ca) {
			t.Errorf("%s: helm upgrade renders another ca.crt than the Secret's", step.name)
		}
		for j, b := range bundles {
			if b != b64(step.ca) {
				t.Errorf("%s: webhook %d does not trust exactly the Secret's ca.crt", step.name, j)
			}
		}
	}
}

// renderWebhookTLS renders the chart as helm upgrade --dry-run=server does
// (reading the cluster) and returns the webhook Secret's tls.crt and ca.crt
// and every webhook's caBundle, base64-encoded as rendered.
func renderWebhookTLS(t *testing.T, cfg *action.Configuration, ch *chart.Chart, values map[string]any) (crt, ca string, bundles []string) {
	t.Helper()
	up := action.NewUpgrade(cfg)
	up.Namespace, up.DryRun, up.DryRunOption = Namespace, true, "server"
	rel, err := up.Run("holdfast", ch, values)
	if err != nil {
		t.Fatalf("helm upgrade --dry-run=server: %v", err)
	}
	ms, err := Split(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(bundles) == 0 {
		t.Fatal("no webhook in the rendered configuration")
	}
	return crt, ca, bundles
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

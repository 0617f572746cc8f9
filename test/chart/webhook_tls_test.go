package chart

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chart"
)

// The webhook's serving certificate in each webhook.tls.mode: generate makes
// the Secret and writes its CA into the configuration; cert-manager renders
// a self-signed root, a CA Issuer and the serving Certificate into the Secret
// the webhook mounts, for the Service's names, and asks cainjector for the
// root (cert-manager.io/inject-ca-from) instead of rendering a caBundle;
// secret mounts the named Secret and injects or embeds what the values say.
// No mode leaves the apiserver without a CA to trust.
func TestTheWebhookCertificateModes(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	svc := "holdfast-webhook." + Namespace + ".svc"
	for _, tc := range []struct {
		name, values string
		// mounted is the Secret the webhook pods mount; inject the
		// configuration's cert-manager.io/inject-ca-from ("" for none, then
		// every webhook carries a caBundle).
		mounted, inject string
		certManager     bool
	}{
		{name: "generate", mounted: "holdfast-webhook-tls"},
		{name: "cert-manager", values: "webhook: {tls: {mode: cert-manager}}", mounted: "holdfast-webhook-tls",
			inject: Namespace + "/holdfast-webhook", certManager: true},
		{name: "secret with injection", values: "webhook: {tls: {mode: secret, secretName: plant-webhook, injectCAFrom: certs/plant-webhook}}",
			mounted: "plant-webhook", inject: "certs/plant-webhook"},
		{name: "secret with a bundle", values: "webhook: {tls: {mode: secret, secretName: plant-webhook, caBundle: \"-----BEGIN CERTIFICATE-----\"}}",
			mounted: "plant-webhook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := renderYAML(t, ch, tc.values)
			objs := map[string]map[string]any{} // Kind/name
			for _, m := range ms {
				objs[m.Kind+"/"+m.Name] = m.Object
			}
			get := func(obj map[string]any, path ...string) any {
				var cur any = obj
				for _, p := range path {
					m, _ := cur.(map[string]any)
					cur = m[p]
				}
				return cur
			}
			dep := objs["Deployment/holdfast-webhook"]
			var mounted string
			vols, _ := get(dep, "spec", "template", "spec", "volumes").([]any)
			for _, vol := range vols {
				if n, _ := get(vol.(map[string]any), "secret", "secretName").(string); n != "" {
					mounted = n
				}
			}
			if mounted != tc.mounted {
				t.Errorf("the webhook mounts Secret %q, want %q", mounted, tc.mounted)
			}
			if _, generated := objs["Secret/holdfast-webhook-tls"]; generated != (tc.name == "generate") {
				t.Errorf("the chart renders the Secret holdfast-webhook-tls: %v", generated)
			}

			vwc := objs["ValidatingWebhookConfiguration/holdfast-webhook"]
			inject, _ := get(vwc, "metadata", "annotations", "cert-manager.io/inject-ca-from").(string)
			if inject != tc.inject {
				t.Errorf("cert-manager.io/inject-ca-from %q, want %q", inject, tc.inject)
			}
			hooks, _ := vwc["webhooks"].([]any)
			for _, h := range hooks {
				bundle, _ := get(h.(map[string]any), "clientConfig", "caBundle").(string)
				if (bundle == "") == (tc.inject == "") {
					t.Errorf("webhook %v: caBundle %q with inject-ca-from %q: the apiserver's CA must come from exactly one", get(h.(map[string]any), "name"), bundle, tc.inject)
				}
			}

			var kinds []string
			for k := range objs {
				if strings.HasPrefix(k, "Issuer/") || strings.HasPrefix(k, "Certificate/") {
					kinds = append(kinds, k)
				}
			}
			if !tc.certManager {
				if len(kinds) > 0 {
					t.Errorf("renders cert-manager objects %v", kinds)
				}
				return
			}
			slices.Sort(kinds)
			want := []string{"Certificate/holdfast-webhook", "Certificate/holdfast-webhook-ca", "Issuer/holdfast-webhook-ca", "Issuer/holdfast-webhook-selfsigned"}
			if !slices.Equal(kinds, want) {
				t.Fatalf("cert-manager objects %v, want %v", kinds, want)
			}
			serving, root := objs["Certificate/holdfast-webhook"], objs["Certificate/holdfast-webhook-ca"]
			// The injected Certificate is the serving one, in the release
			// namespace, writing the Secret the pods mount.
			if Namespace+"/"+get(serving, "metadata", "name").(string) != inject || get(serving, "metadata", "namespace") != Namespace {
				t.Errorf("inject-ca-from %q does not name the serving Certificate", inject)
			}
			if get(serving, "spec", "secretName") != mounted {
				t.Errorf("the serving Certificate writes Secret %v, the pods mount %q", get(serving, "spec", "secretName"), mounted)
			}
			dns, _ := get(serving, "spec", "dnsNames").([]any)
			if !slices.Contains(dns, any(svc)) || !slices.Contains(dns, any(svc+".cluster.local")) {
				t.Errorf("the serving Certificate names %v, want the Service %s", dns, svc)
			}
			if get(serving, "spec", "isCA") == true || get(root, "spec", "isCA") != true {
				t.Errorf("isCA: serving %v, root %v", get(serving, "spec", "isCA"), get(root, "spec", "isCA"))
			}
			if get(serving, "spec", "renewBefore") == nil {
				t.Errorf("the serving Certificate sets no renewBefore")
			}
			// The chain: selfsigned -> root Certificate -> CA Issuer over the
			// root's Secret -> serving Certificate.
			if get(root, "spec", "issuerRef", "name") != "holdfast-webhook-selfsigned" || get(objs["Issuer/holdfast-webhook-selfsigned"], "spec", "selfSigned") == nil {
				t.Errorf("the root is not issued by the self-signed Issuer")
			}
			if get(objs["Issuer/holdfast-webhook-ca"], "spec", "ca", "secretName") != get(root, "spec", "secretName") {
				t.Errorf("the CA Issuer signs with %v, the root is in %v", get(objs["Issuer/holdfast-webhook-ca"], "spec", "ca", "secretName"), get(root, "spec", "secretName"))
			}
			if get(serving, "spec", "issuerRef", "name") != "holdfast-webhook-ca" || get(serving, "spec", "issuerRef", "kind") != "Issuer" {
				t.Errorf("the serving Certificate is issued by %v", get(serving, "spec", "issuerRef"))
			}
		})
	}
}

// renderYAML renders the chart with values given as YAML.
func renderYAML(t *testing.T, ch *chart.Chart, values string) []Manifest {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, v)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

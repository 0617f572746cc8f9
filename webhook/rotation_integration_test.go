//go:build integration

package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

// The webhook's serving certificate is rotated with no restart (the
// self-signed rotation of docs/operations.md#webhook-certificate): the
// configuration trusts the old and the new CA, the mounted Secret's files
// change as the kubelet changes them (a swap of ..data), the same process
// serves the new certificate and reports its expiry, and the apiserver,
// trusting only the new CA, reaches it. Between the steps the apiserver
// trusting only the old CA can no longer call it: what it serves did change.
func TestTheWebhookServesARotatedCertificateWithoutRestart(t *testing.T) {
	kilnCluster(t)
	oldCA, newCA := leasetlstest.NewCA(t, "holdfast-webhook-ca"), leasetlstest.NewCA(t, "holdfast-webhook-ca-2")
	dir := t.TempDir()
	oldFiles, newFiles := oldCA.KeyPairFiles(t, servingTemplate(90*24*time.Hour)), newCA.KeyPairFiles(t, servingTemplate(180*24*time.Hour))
	leasetlstest.WriteAtomic(t, dir, oldFiles)
	setCABundle(t, oldCA.CertPEM)
	metricsAddr := ports.Addr(t)
	p := startBinary(t, dir, metricsAddr)
	refusedByTheNodeRule(t, p.ruleAnswers(t))
	first := servedCertificate(t)
	if first.Issuer.CommonName != "holdfast-webhook-ca" {
		t.Fatalf("serving a certificate of %q, want the old CA's", first.Issuer)
	}
	if got := servingExpiryMetric(t, metricsAddr); got != first.NotAfter.Unix() {
		t.Fatalf("the expiry metric says %d, the served certificate expires at %d", got, first.NotAfter.Unix())
	}
	pid := p.cmd.Process.Pid

	// 1. Trust both CAs.
	setCABundle(t, leasetlstest.Bundle(oldCA, newCA))
	refusedByTheNodeRule(t, p.ruleAnswers(t))
	// 2. The Secret's new certificate reaches the pod's files.
	leasetlstest.WriteAtomic(t, dir, newFiles)
	deadline := time.Now().Add(60 * time.Second)
	var served *x509.Certificate
	for {
		if served = servedCertificate(t); served.Issuer.CommonName == "holdfast-webhook-ca-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after the rotation the webhook still serves the certificate of %q", served.Issuer)
		}
		select {
		case err := <-p.exited:
			t.Fatalf("holdfast-webhook exited: %v\n%s", err, p.stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if p.cmd.Process.Pid != pid || p.cmd.ProcessState != nil {
		t.Fatalf("the webhook process changed or exited")
	}
	t.Logf("rotated without a restart: pid %d serves the certificate of %q (expires %s)", pid, served.Issuer.CommonName, served.NotAfter.UTC().Format(time.RFC3339))
	if got := servingExpiryMetric(t, metricsAddr); got != served.NotAfter.Unix() {
		t.Errorf("the expiry metric says %d after the rotation, the served certificate expires at %d", got, served.NotAfter.Unix())
	}
	refusedByTheNodeRule(t, p.ruleAnswers(t))

	// The apiserver trusting the old CA alone now fails to call it. The
	// bundle holds it twice: the apiserver keeps one client per bundle, and
	// the client of the old CA alone still holds its connection from before
	// the rotation (a connection outlives the certificate it began with).
	setCABundle(t, leasetlstest.Bundle(oldCA, oldCA))
	poll.Until(t, 60*time.Second, "the apiserver trusting only the old CA fails to call the webhook", poll.True(func() bool {
		res := env.Kubectl().Run(t, "", "label", "node", "edge-9", "holdfast.io/desired-role=server")
		return strings.Contains(res.Stderr, "failed calling webhook") && strings.Contains(res.Stderr, "x509")
	}))
	// 3. Retire the old CA: the apiserver trusting the new one alone reaches it.
	setCABundle(t, newCA.CertPEM)
	refusedByTheNodeRule(t, p.ruleAnswers(t))
}

// servingTemplate is a serving certificate for the suite's webhook address,
// valid for life.
func servingTemplate(life time.Duration) *x509.Certificate {
	now := time.Now().Truncate(time.Second)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "holdfast-webhook"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(env.Webhooks.LocalServingHost); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{env.Webhooks.LocalServingHost}
	}
	return tmpl
}

// setCABundle makes every webhook of the suite's configuration trust bundle
// (as the chart renders it from the Secret's ca.crt); the suite's own CA
// again when the test ends.
func setCABundle(t *testing.T, bundle []byte) {
	t.Helper()
	ctx := context.Background()
	set := func(b []byte) error {
		var list admissionregistrationv1.ValidatingWebhookConfigurationList
		if err := env.Client.List(ctx, &list); err != nil {
			return err
		}
		for i := range list.Items {
			vwc := &list.Items[i]
			orig := vwc.DeepCopy()
			for j := range vwc.Webhooks {
				vwc.Webhooks[j].ClientConfig.CABundle = b
			}
			if err := env.Client.Patch(ctx, vwc, client.MergeFrom(orig)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := set(bundle); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(env.Webhooks.LocalServingCAData); err != nil {
			t.Errorf("restoring the suite's webhook CA: %v", err)
		}
	})
}

// servedCertificate is the leaf the webhook's address presents now.
func servedCertificate(t *testing.T) *x509.Certificate {
	t.Helper()
	addr := net.JoinHostPort(env.Webhooks.LocalServingHost, strconv.Itoa(env.Webhooks.LocalServingPort))
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // reads what is served; trust is the apiserver's to judge
	if err != nil {
		t.Fatalf("connecting to the webhook at %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// servingExpiryMetric reads holdfast_webhook_serving_certificate_expiry_timestamp_seconds.
func servingExpiryMetric(t *testing.T, addr string) int64 {
	t.Helper()
	const name = "holdfast_webhook_serving_certificate_expiry_timestamp_seconds"
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("the webhook's /metrics has no %s", name)
	return 0
}

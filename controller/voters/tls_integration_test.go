//go:build integration

package voters_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-io/holdfast/controller/voters"
	"github.com/holdfast-io/holdfast/test/etcdproc"
	"github.com/holdfast-io/holdfast/test/etcdtls"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestEtcdClientTLSFromTheSecret: a real etcd member that requires client
// certificates answers the controller's client built from a Secret with
// tls.crt, tls.key and ca.crt (the VoterPolicy's clientCertSecretRef), and
// refuses a client without one; a Secret missing a key is refused naming it.
func TestEtcdClientTLSFromTheSecret(t *testing.T) {
	pki := etcdtls.New(t)
	dir := t.TempDir()
	ms, err := etcdproc.NewMembers("tls1")
	if err != nil {
		t.Fatal(err)
	}
	m := etcdtls.HTTPS(ms[0])
	cmd := etcdproc.Command(filepath.Join(env.BinDir, "etcd"), m, filepath.Join(dir, "db"), etcdproc.InitialCluster(m), "new")
	cmd.Args = append(cmd.Args, pki.ServerArgs(t, dir)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	secret := pki.Secret(releaseNS, "etcd-client")
	cfg, err := voters.TLSFromSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &voters.ClientEtcd{TLS: cfg, StatusTimeout: time.Second, RequestTimeout: 2 * time.Second}
	var view voters.EtcdView
	poll.Until(t, 30*time.Second, "the TLS member answers the client built from the Secret", func() (bool, string) {
		view = withCert.Observe(context.Background(), []string{m.ClientURL})
		return view.Err == "" && len(view.Members) == 1 && view.Members[0].Answered, view.Err
	})

	// The member really requires a client certificate: the CA alone is refused.
	noCert := cfg.Clone()
	noCert.Certificates = nil
	if v := (&voters.ClientEtcd{TLS: noCert, StatusTimeout: time.Second, RequestTimeout: 2 * time.Second}).Observe(context.Background(), []string{m.ClientURL}); v.Err == "" {
		t.Fatalf("a client without a certificate read the member list: %+v", v)
	}

	bad := secret.DeepCopy()
	delete(bad.Data, corev1.ServiceAccountRootCAKey)
	if _, err := voters.TLSFromSecret(bad); err == nil || !strings.Contains(err.Error(), "Secret holdfast-system/etcd-client: data[ca.crt]: must be set") {
		t.Errorf("a Secret without ca.crt: %v", err)
	}
}

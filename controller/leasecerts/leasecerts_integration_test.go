//go:build integration

package leasecerts_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/leasecerts"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.NewKlogr())
	testenv.Main(m, &env, testenv.Options{})
}

// signer runs the lease signer and the trust bundle publisher on the real
// apiserver with the lease CA in dir, as the units role does.
func signer(t *testing.T, dir string) *leasecerts.CA {
	t.Helper()
	log := ktesting.NewLogger(t, ktesting.NewConfig())
	ca, err := leasetls.WatchAuthorityDir(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	hasUnit, _ := labels.NewRequirement(holdfastv1.LabelUnit, selection.Exists, nil)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                           {Label: labels.NewSelector().Add(*hasUnit)},
			&certificatesv1.PodCertificateRequest{}: {Field: fields.OneTermEqualSelector("spec.signerName", leaseapi.SignerName)},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&leasecerts.Signer{Client: mgr.GetClient(), CA: ca}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(&leasecerts.TrustBundle{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), CA: ca}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	go ca.Run(ctx, 100*time.Millisecond)
	t.Cleanup(func() { cancel(); <-done })
	return ca
}

// runtimePod creates unit's Unit bound at epoch and its runtime pod (as the
// controller builds it) on node, and returns the pod and the node's UID.
func runtimePod(t *testing.T, ns, unit string, epoch int64, node string) (*corev1.Pod, *corev1.Node) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unit},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "unit-runtime:test"}, NodeSelector: map[string]string{"plant.example/io": unit}}}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: epoch, Pod: units.PodName(unit, epoch), Node: node}
	if err := env.Client.Status().Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	pod := units.RuntimePod(u, epoch, units.Placement{})
	pod.Spec.NodeName = node // the scheduler's binding, done here in the create
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod, n
}

func podCertificateSource(pod *corev1.Pod) (*corev1.PodCertificateProjection, *corev1.ClusterTrustBundleProjection) {
	var pc *corev1.PodCertificateProjection
	var ctb *corev1.ClusterTrustBundleProjection
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.PodCertificate != nil {
				pc = s.PodCertificate
			}
			if s.ClusterTrustBundle != nil {
				ctb = s.ClusterTrustBundle
			}
		}
	}
	return pc, ctb
}

// The kubelet's side of the contract on the real apiserver: the runtime pod
// the controller builds asks the lease signer for its certificate, which
// the apiserver accepts as the signer writes it (times, chain, key) and
// which names the pod's binding; the CA reaches the pod in the
// ClusterTrustBundle; a request for an earlier epoch's pod is denied for
// good; a changed bundle is published again.
func TestRuntimePodsGetTheirLeaseCredentialsFromTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	ca1 := leasetlstest.NewCA(t, "lease-ca")
	dir := ca1.Dir(t)
	signer(t, dir)

	pod, node := runtimePod(t, ns, "kiln-1", 3, "lc-edge-1")
	pcSrc, ctbSrc := podCertificateSource(pod)
	if pcSrc == nil || ctbSrc == nil || pcSrc.SignerName != leaseapi.SignerName || *ctbSrc.SignerName != leaseapi.SignerName {
		t.Fatalf("the runtime pod does not project its lease credentials from the signer: %+v %+v", pcSrc, ctbSrc)
	}
	req, key, err := leasetlstest.RequestPodCertificate(ctx, env.Client, pod, pcSrc, node.UID, "sa-uid")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := leasetlstest.AwaitPodCertificate(ctx, env.Client, req, key)
	if err != nil {
		t.Fatal(err)
	}
	var bundle []byte
	poll.Until(t, time.Minute, "the trust bundle", func() (bool, string) {
		bundle, err = leasetlstest.ProjectedTrustBundle(ctx, env.Client, ctbSrc)
		return err == nil, fmt.Sprint(err)
	})
	rc, err := leasetls.ParseRuntime(creds, bundle)
	if err != nil {
		t.Fatalf("the credentials the kubelet would write do not load: %v", err)
	}
	if r := leasetls.VerifyPeer([]*x509.Certificate{rc.Cert.Leaf}, ca1.Roots, x509.ExtKeyUsageServerAuth, leaseapi.RuntimeIdentity(ns+"/kiln-1", 3)); r != nil {
		t.Fatalf("the issued certificate: %v", r)
	}
	if life := rc.Cert.Leaf.NotAfter.Sub(rc.Cert.Leaf.NotBefore); life > 24*time.Hour || life < 23*time.Hour {
		t.Fatalf("the certificate lives %v, want a day", life)
	}
	if _, err := ca1.GrantorCertificate(t).Leaf.Verify(x509.VerifyOptions{Roots: rc.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the projected bundle does not trust the lease CA's grantor: %v", err)
	}

	// The Unit moves on to epoch 4: the pod of epoch 3 gets nothing more.
	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Pod: units.PodName("kiln-1", 4)}
	if err := env.Client.Status().Update(ctx, &u); err != nil {
		t.Fatal(err)
	}
	var answer error
	poll.Until(t, time.Minute, "a renewal for the runtime of a past epoch refused", func() (bool, string) {
		req, key, err := leasetlstest.RequestPodCertificate(ctx, env.Client, pod, pcSrc, node.UID, "sa-uid")
		if err != nil {
			t.Fatal(err)
		}
		_, answer = leasetlstest.AwaitPodCertificate(ctx, env.Client, req, key)
		return answer != nil, "issued"
	})
	if !strings.Contains(answer.Error(), "Denied: StaleEpoch") {
		t.Fatalf("a renewal for the runtime of a past epoch: %v, want Denied: StaleEpoch", answer)
	}

	// A second CA joins the bundle: the ClusterTrustBundle follows.
	ca2 := leasetlstest.NewCA(t, "lease-ca-2")
	leasetlstest.WriteAtomic(t, dir, ca1.DirFiles(leasetlstest.Bundle(ca1, ca2)))
	poll.Until(t, time.Minute, "the trust bundle published again with both CAs", func() (bool, string) {
		b, err := leasetlstest.ProjectedTrustBundle(ctx, env.Client, ctbSrc)
		return err == nil && strings.Count(string(b), "BEGIN CERTIFICATE") == 2, fmt.Sprint(err)
	})
	var ctb certificatesv1.ClusterTrustBundle
	if err := env.Client.Get(ctx, client.ObjectKey{Name: leasecerts.TrustBundleName}, &ctb); err != nil || ctb.Spec.SignerName != leaseapi.SignerName {
		t.Fatalf("ClusterTrustBundle %s: %+v %v", leasecerts.TrustBundleName, ctb.Spec, err)
	}
}

// A warm standby pod on the real apiserver: its certificate names its UID
// (it has no epoch), and still does once a binding promoted it and it
// carries the epoch's label, so the grantor's check of the recorded UID
// holds across its renewals; once the binding moves on it gets nothing.
func TestAWarmPodGetsTheLeaseCertificateOfItsUID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	ca := leasetlstest.NewCA(t, "lease-ca")
	signer(t, ca.Dir(t))

	_, bound := runtimePod(t, ns, "kiln-1", 3, "lcw-edge-1")
	var u holdfastv1.Unit
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kiln-1"}, &u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Availability = holdfastv1.Availability{Mode: holdfastv1.Failover, WarmStandby: true,
		Targets: &holdfastv1.FailoverTargets{Nodes: []string{"lcw-edge-2"}}}
	if err := env.Client.Update(ctx, &u); err != nil {
		t.Fatal(err)
	}
	standby := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lcw-edge-2"}}
	if err := env.Client.Create(ctx, standby); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), standby) })
	warm := units.RuntimePod(&u, 3, units.Placement{})
	warm.Name = holdfastv1.WarmPodName("kiln-1", standby.Name)
	delete(warm.Labels, holdfastv1.LabelEpoch)
	warm.Labels[holdfastv1.LabelWarmStandby] = standby.Name
	warm.Spec.NodeName = standby.Name
	if err := env.Client.Create(ctx, warm); err != nil {
		t.Fatal(err)
	}
	pcSrc, _ := podCertificateSource(warm)
	certify := func() ([]byte, error) {
		req, key, err := leasetlstest.RequestPodCertificate(ctx, env.Client, warm, pcSrc, standby.UID, "sa-uid")
		if err != nil {
			t.Fatal(err)
		}
		return leasetlstest.AwaitPodCertificate(ctx, env.Client, req, key)
	}
	want := leaseapi.WarmRuntimeIdentity(ns+"/kiln-1", string(warm.UID))
	holds := func(what string, creds []byte) {
		t.Helper()
		rc, err := leasetls.ParseRuntime(creds, ca.CertPEM)
		if err != nil {
			t.Fatalf("%s: the credentials do not load: %v", what, err)
		}
		if r := leasetls.VerifyPeer([]*x509.Certificate{rc.Cert.Leaf}, ca.Roots, x509.ExtKeyUsageServerAuth, want); r != nil {
			t.Fatalf("%s: %v", what, r)
		}
		for _, e := range []int64{3, 4} {
			if r := leasetls.VerifyPeer([]*x509.Certificate{rc.Cert.Leaf}, ca.Roots, x509.ExtKeyUsageServerAuth, leaseapi.RuntimeIdentity(ns+"/kiln-1", e)); r == nil {
				t.Fatalf("%s: the warm pod's certificate names epoch %d", what, e)
			}
		}
	}
	creds, err := certify()
	if err != nil {
		t.Fatalf("the warm pod's request: %v", err)
	}
	holds("the warm pod", creds)

	// Promotion: the binding records the pod, then the pod its epoch.
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Node: standby.Name, Pod: warm.Name, PodUID: string(warm.UID)}
	if err := env.Client.Status().Update(ctx, &u); err != nil {
		t.Fatal(err)
	}
	warm.Labels[holdfastv1.LabelEpoch] = "4"
	if err := env.Client.Update(ctx, warm); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "a renewal of the promoted pod issued", func() (bool, string) {
		creds, err = certify()
		return err == nil, fmt.Sprint(err)
	})
	holds("the promoted pod", creds)

	// The binding moves on to epoch 5 elsewhere: nothing more for it.
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 5, Node: bound.Name, Pod: units.PodName("kiln-1", 5)}
	if err := env.Client.Status().Update(ctx, &u); err != nil {
		t.Fatal(err)
	}
	var answer error
	poll.Until(t, time.Minute, "a renewal of the left-behind pod refused", func() (bool, string) {
		_, answer = certify()
		return answer != nil, "issued"
	})
	if !strings.Contains(answer.Error(), "Denied: StaleEpoch") {
		t.Fatalf("a renewal of a warm pod left behind: %v, want Denied: StaleEpoch", answer)
	}
}

package leasetlstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RequestPodCertificate plays the kubelet's pod certificate manager for one
// podCertificate projection of pod (bound to a node whose UID is nodeUID):
// it makes a P-256 key, asks the signer with a PodCertificateRequest the way
// the kubelet does, and returns the request as created.
func RequestPodCertificate(ctx context.Context, c client.Client, pod *corev1.Pod, src *corev1.PodCertificateProjection, nodeUID, saUID types.UID) (*certificatesv1.PodCertificateRequest, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, GenerateName: "req-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: src.SignerName, PodName: pod.Name, PodUID: pod.UID,
			ServiceAccountName: sa, ServiceAccountUID: saUID,
			NodeName: types.NodeName(pod.Spec.NodeName), NodeUID: nodeUID,
			MaxExpirationSeconds: src.MaxExpirationSeconds, StubPKCS10Request: csr,
		},
	}
	if err := c.Create(ctx, req); err != nil {
		return nil, nil, err
	}
	return req, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// AwaitPodCertificate waits for the signer's answer to req and returns the
// credential bundle the kubelet writes at credentialBundlePath (the key,
// then the chain), or the denial or failure as an error.
func AwaitPodCertificate(ctx context.Context, c client.Reader, req *certificatesv1.PodCertificateRequest, keyPEM []byte) ([]byte, error) {
	for {
		var cur certificatesv1.PodCertificateRequest
		if err := c.Get(ctx, client.ObjectKeyFromObject(req), &cur); err != nil {
			return nil, err
		}
		for _, cond := range cur.Status.Conditions {
			switch cond.Type {
			case certificatesv1.PodCertificateRequestConditionTypeIssued:
				return append(append([]byte{}, keyPEM...), cur.Status.CertificateChain...), nil
			case certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed:
				return nil, fmt.Errorf("PodCertificateRequest %s/%s %s: %s: %s", cur.Namespace, cur.Name, cond.Type, cond.Reason, cond.Message)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("PodCertificateRequest %s/%s not answered: %w", cur.Namespace, cur.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ProjectedTrustBundle is what the kubelet writes for a clusterTrustBundle
// projection by signer name: the bundles of that signer the selector picks,
// joined.
func ProjectedTrustBundle(ctx context.Context, c client.Reader, src *corev1.ClusterTrustBundleProjection) ([]byte, error) {
	if src.SignerName == nil {
		return nil, fmt.Errorf("only projections by signer name are played here")
	}
	sel := labels.Nothing()
	if src.LabelSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(src.LabelSelector); err != nil {
			return nil, err
		}
	}
	var list certificatesv1.ClusterTrustBundleList
	if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var out []byte
	for _, b := range list.Items {
		if b.Spec.SignerName == *src.SignerName {
			out = append(out, b.Spec.TrustBundle...)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ClusterTrustBundle of signer %s yet", *src.SignerName)
	}
	return out, nil
}

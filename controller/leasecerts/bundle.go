package leasecerts

import (
	"bytes"
	"context"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// TrustBundleName is the ClusterTrustBundle that carries the lease CA bundle
// to runtime pods. A bundle linked to a signer is named after it, and only
// someone allowed to attest for the signer may write it.
var TrustBundleName = strings.ReplaceAll(leaseapi.SignerName, "/", ":") + ":ca"

// TrustBundle keeps the ClusterTrustBundle equal to the lease CA bundle. It
// runs on the leader, writes at start and after every change of the CA
// directory, and retries until it has written.
type TrustBundle struct {
	// Reader reads past the cache (one object; no informer for it).
	Reader client.Reader
	Writer client.Client
	CA     *CA
}

// NeedLeaderElection: only the leader writes.
func (b *TrustBundle) NeedLeaderElection() bool { return true }

// Start publishes until ctx ends.
func (b *TrustBundle) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("clusterTrustBundle", TrustBundleName)
	changed := make(chan struct{}, 1)
	b.CA.OnChange(func(*leasetls.Authority) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	backoff := time.Second
	for {
		err := b.publish(ctx, log)
		wait := time.Duration(0)
		if err != nil {
			log.Error(err, "Publishing the lease CA bundle; retrying", "in", backoff)
			wait, backoff = backoff, min(2*backoff, 30*time.Second)
		} else {
			backoff = time.Second
		}
		var retry <-chan time.Time
		if wait > 0 {
			retry = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		}
	}
}

func (b *TrustBundle) publish(ctx context.Context, log klog.Logger) error {
	bundle := string(b.CA.Current().Bundle)
	var cur certificatesv1.ClusterTrustBundle
	err := b.Reader.Get(ctx, client.ObjectKey{Name: TrustBundleName}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		ctb := &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: TrustBundleName, Labels: map[string]string{"app.kubernetes.io/name": "holdfast"}},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: leaseapi.SignerName, TrustBundle: bundle},
		}
		if err := b.Writer.Create(ctx, ctb); err != nil {
			return err
		}
		log.Info("Published the lease CA bundle")
		return nil
	case err != nil:
		return err
	case bytes.Equal([]byte(cur.Spec.TrustBundle), []byte(bundle)):
		return nil
	}
	cur.Spec.TrustBundle = bundle
	if err := b.Writer.Update(ctx, &cur); err != nil {
		return err
	}
	log.Info("Published the changed lease CA bundle; runtime pods read it as their kubelets sync it")
	return nil
}

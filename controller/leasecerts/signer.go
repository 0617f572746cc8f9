package leasecerts

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// Signer answers the PodCertificateRequests addressed to api/lease
// SignerName: a runtime pod's kubelet asks for the pod's lease serving
// certificate, and the signer issues it, naming the pod's unit and epoch,
// only to the pod of its Unit's current binding on the node it runs on; a
// warm standby pod's names its unit and its UID (api/lease
// WarmRuntimeIdentity).
type Signer struct {
	// Client reads pods and Units from the cache and writes the requests'
	// status.
	Client client.Client
	CA     *CA
	Clock  clock.PassiveClock
}

// SetupWithManager watches the requests addressed to the lease signer.
func (s *Signer) SetupWithManager(mgr ctrl.Manager) error {
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		r, ok := o.(*certificatesv1.PodCertificateRequest)
		return ok && r.Spec.SignerName == leaseapi.SignerName
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("leasesigner").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&certificatesv1.PodCertificateRequest{}, builder.WithPredicates(ours)).
		Complete(s)
}

// Timings of the signer's judgement.
const (
	// cacheGrace: a request whose pod, Unit or binding the cache does not
	// show yet is looked at again until it is this old; the kubelet asks
	// only after the pod was bound to its node, so the cache has long seen
	// a runtime pod by then.
	cacheGrace = time.Minute
	recheck    = time.Second
	// runtimeLifetime caps a runtime certificate's life; the kubelet renews
	// it at beginRefreshAt, two thirds of the way.
	runtimeLifetime = 24 * time.Hour
	// notBeforeSlack dates a certificate a little before its making, within
	// the five minutes the apiserver allows.
	notBeforeSlack = time.Minute
	// minLifetime is the shortest life the apiserver accepts.
	minLifetime = time.Hour
)

// verdict is the signer's answer to one request.
type verdict struct {
	// wait: the cache cannot tell yet; look again.
	wait bool
	// deny: with reason and message; otherwise issue for unit at epoch, or,
	// when warmUID is set, for unit's warm standby pod of that UID.
	deny            bool
	reason, message string
	unit            string
	epoch           int64
	warmUID         string
}

// judge decides a request from what the cache shows: the pod it names (nil
// if absent) and its Unit (nil if absent). It issues only to the live pod
// of the Unit's current binding, or to a warm standby pod of the Unit, on
// the node the request came from.
func judge(req *certificatesv1.PodCertificateRequest, pod *corev1.Pod, u *holdfastv1.Unit, now time.Time) verdict {
	young := now.Sub(req.CreationTimestamp.Time) < cacheGrace
	pending := func(why string) verdict {
		if young {
			return verdict{wait: true}
		}
		return verdict{deny: true, reason: "NotTheCurrentBinding", message: why}
	}
	name := req.Namespace + "/" + req.Spec.PodName
	if pod == nil || pod.UID != req.Spec.PodUID {
		return pending(fmt.Sprintf("pod %s (uid %s) is not a live holdfast runtime pod; the %s signer issues only to the runtime pod of a Unit's current binding",
			name, req.Spec.PodUID, leaseapi.SignerName))
	}
	unit, hasUnit := pod.Labels[holdfastv1.LabelUnit]
	standby, warm := pod.Labels[holdfastv1.LabelWarmStandby]
	label, labelled := pod.Labels[holdfastv1.LabelEpoch]
	epoch, err := holdfastv1.ParseEpoch(label)
	if warm && !labelled {
		err = nil
	}
	owner := metav1.GetControllerOf(pod)
	if !hasUnit || err != nil || owner == nil || owner.Kind != "Unit" || owner.APIVersion != holdfastv1.GroupVersion.String() || owner.Name != unit {
		return verdict{deny: true, reason: "NotARuntimePod", message: fmt.Sprintf(
			"pod %s is not a runtime pod: it needs the %s label, the %s label (or, on a warm standby, %s) and its Unit as its controller",
			name, holdfastv1.LabelUnit, holdfastv1.LabelEpoch, holdfastv1.LabelWarmStandby)}
	}
	if !pod.DeletionTimestamp.IsZero() {
		return verdict{deny: true, reason: "NotTheCurrentBinding", message: fmt.Sprintf("pod %s is being deleted", name)}
	}
	if pod.Spec.NodeName == "" {
		return pending(fmt.Sprintf("pod %s is not bound to a node", name))
	}
	if string(req.Spec.NodeName) != pod.Spec.NodeName {
		return verdict{deny: true, reason: "WrongNode", message: fmt.Sprintf("pod %s runs on node %s; the request came for node %s", name, pod.Spec.NodeName, req.Spec.NodeName)}
	}
	if u == nil {
		return pending(fmt.Sprintf("unit %s/%s of pod %s is not found", pod.Namespace, unit, name))
	}
	if u.UID != owner.UID {
		return verdict{deny: true, reason: "NotARuntimePod", message: fmt.Sprintf("pod %s is owned by another unit %s/%s (uid %s, not %s)", name, pod.Namespace, unit, owner.UID, u.UID)}
	}
	if warm {
		return judgeWarm(pod, u, standby, labelled, epoch, pending)
	}
	b := u.Status.RuntimeBinding
	switch {
	case b == nil || b.Epoch < epoch:
		return pending(fmt.Sprintf("unit %s/%s has no binding at epoch %d", u.Namespace, u.Name, epoch))
	case b.Epoch > epoch:
		return verdict{deny: true, reason: "StaleEpoch", message: fmt.Sprintf(
			"unit %s/%s is bound at epoch %d; pod %s is the runtime of epoch %d, which is never granted again", u.Namespace, u.Name, b.Epoch, name, epoch)}
	case b.Pod != "" && b.Pod != pod.Name:
		return verdict{deny: true, reason: "NotTheCurrentBinding", message: fmt.Sprintf("unit %s/%s at epoch %d runs pod %s, not %s", u.Namespace, u.Name, epoch, b.Pod, pod.Name)}
	}
	return verdict{unit: u.Namespace + "/" + u.Name, epoch: epoch}
}

// judgeWarm decides for a warm standby pod (docs/design.md §3, Warm
// standby) on standby: its certificate names its UID, never an epoch, and
// the grantor grants it only once a binding records that UID. It is issued
// one while its Unit keeps warm standbys, on the node its label names and
// not beside the binding's runtime, or once a binding promoted it; a warm
// pod labelled with an epoch is that binding's, as any runtime pod.
func judgeWarm(pod *corev1.Pod, u *holdfastv1.Unit, standby string, labelled bool, epoch int64, pending func(string) verdict) verdict {
	name, unit := pod.Namespace+"/"+pod.Name, u.Namespace+"/"+u.Name
	b := u.Status.RuntimeBinding
	promoted := b != nil && b.PodUID == string(pod.UID) && b.Pod == pod.Name
	switch {
	case labelled && (b == nil || b.Epoch < epoch):
		return pending(fmt.Sprintf("unit %s has no binding at epoch %d", unit, epoch))
	case labelled && b.Epoch > epoch:
		return verdict{deny: true, reason: "StaleEpoch", message: fmt.Sprintf(
			"unit %s is bound at epoch %d; warm pod %s was promoted at epoch %d, which is never granted again", unit, b.Epoch, name, epoch)}
	case labelled && !promoted:
		return verdict{deny: true, reason: "NotTheCurrentBinding", message: fmt.Sprintf(
			"unit %s at epoch %d runs pod %s (uid %s), not warm pod %s (uid %s)", unit, b.Epoch, b.Pod, b.PodUID, name, pod.UID)}
	case promoted:
	case !u.Spec.Availability.WarmStandby:
		return verdict{deny: true, reason: "NotAWarmStandby", message: fmt.Sprintf(
			"unit %s keeps no warm standby (spec.availability.warmStandby is false) and no binding promoted warm pod %s", unit, name)}
	case pod.Spec.NodeName != standby:
		return verdict{deny: true, reason: "WrongNode", message: fmt.Sprintf(
			"warm pod %s is the standby of node %s (%s) but runs on node %s", name, standby, holdfastv1.LabelWarmStandby, pod.Spec.NodeName)}
	case b != nil && b.Node == standby:
		return verdict{deny: true, reason: "NotAWarmStandby", message: fmt.Sprintf(
			"warm pod %s runs on node %s, unit %s's bound node, where no warm standby is kept", name, standby, unit)}
	}
	return verdict{unit: unit, warmUID: string(pod.UID)}
}

// Reconcile answers one request.
func (s *Signer) Reconcile(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx)
	var req certificatesv1.PodCertificateRequest
	if err := s.Client.Get(ctx, r.NamespacedName, &req); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if req.Spec.SignerName != leaseapi.SignerName || answered(&req) {
		return reconcile.Result{}, nil
	}
	var pod *corev1.Pod
	var p corev1.Pod
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Spec.PodName}, &p); err == nil {
		pod = &p
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	var unit *holdfastv1.Unit
	if pod != nil {
		var u holdfastv1.Unit
		if err := s.Client.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: pod.Labels[holdfastv1.LabelUnit]}, &u); err == nil {
			unit = &u
		} else if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
	}
	now := s.Clock.Now()
	v := judge(&req, pod, unit, now)
	cond := metav1.Condition{Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now), ObservedGeneration: req.Generation}
	switch {
	case v.wait:
		return reconcile.Result{RequeueAfter: recheck}, nil
	case v.deny:
		cond.Type, cond.Reason, cond.Message = certificatesv1.PodCertificateRequestConditionTypeDenied, v.reason, v.message
		log.Info("Denied a lease certificate", "request", klog.KObj(&req), "reason", v.reason, "message", v.message)
	default:
		if err := s.issue(&req, v, now); err != nil {
			cond.Type, cond.Reason, cond.Message = certificatesv1.PodCertificateRequestConditionTypeFailed, "CannotSign", err.Error()
			log.Error(err, "Cannot sign a lease certificate", "request", klog.KObj(&req))
		} else {
			cond.Type, cond.Reason = certificatesv1.PodCertificateRequestConditionTypeIssued, "Issued"
			cond.Message = fmt.Sprintf("lease serving certificate of unit %s at epoch %d", v.unit, v.epoch)
			if v.warmUID != "" {
				cond.Message = fmt.Sprintf("lease serving certificate of unit %s's warm standby pod %s", v.unit, v.warmUID)
			}
			log.V(2).Info("Issued a lease certificate", "request", klog.KObj(&req), "unit", v.unit, "epoch", v.epoch, "warmPodUID", v.warmUID, "notAfter", req.Status.NotAfter)
		}
	}
	req.Status.Conditions = append(req.Status.Conditions, cond)
	if err := s.Client.Status().Update(ctx, &req); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	issued.WithLabelValues(map[string]string{
		certificatesv1.PodCertificateRequestConditionTypeIssued: "issued",
		certificatesv1.PodCertificateRequestConditionTypeDenied: "denied",
		certificatesv1.PodCertificateRequestConditionTypeFailed: "failed",
	}[cond.Type]).Inc()
	return reconcile.Result{}, nil
}

// issue signs the request's key into req's status.
func (s *Signer) issue(req *certificatesv1.PodCertificateRequest, v verdict, now time.Time) error {
	csr, err := x509.ParseCertificateRequest(req.Spec.StubPKCS10Request)
	if err != nil {
		return fmt.Errorf("the request's PKCS#10 request: %w", err)
	}
	a := s.CA.Current()
	notBefore := now.Add(-notBeforeSlack).Truncate(time.Second)
	life := runtimeLifetime
	if m := req.Spec.MaxExpirationSeconds; m != nil && time.Duration(*m)*time.Second < life {
		life = time.Duration(*m) * time.Second
	}
	notAfter := notBefore.Add(life)
	if a.Cert.NotAfter.Before(notAfter) {
		notAfter = a.Cert.NotAfter
	}
	if notAfter.Sub(notBefore) < minLifetime {
		return fmt.Errorf("the lease CA %q expires at %s, within the hour: rotate it (docs/operations.md)", a.Cert.Subject, a.Cert.NotAfter.Format(time.RFC3339))
	}
	tmpl := leasetls.RuntimeTemplate(v.unit, v.epoch, notBefore, notAfter)
	if v.warmUID != "" {
		tmpl = leasetls.WarmRuntimeTemplate(v.unit, v.warmUID, notBefore, notAfter)
	}
	chain, leaf, err := a.Issue(tmpl, csr.PublicKey)
	if err != nil {
		return err
	}
	refresh := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
	if min := leaf.NotBefore.Add(10 * time.Minute); refresh.Before(min) {
		refresh = min
	}
	req.Status.CertificateChain = string(chain)
	req.Status.NotBefore = ptr.To(metav1.NewTime(leaf.NotBefore))
	req.Status.NotAfter = ptr.To(metav1.NewTime(leaf.NotAfter))
	req.Status.BeginRefreshAt = ptr.To(metav1.NewTime(refresh))
	return nil
}

// answered: the request is issued, denied or failed; its status is final.
func answered(r *certificatesv1.PodCertificateRequest) bool {
	for _, c := range r.Status.Conditions {
		switch c.Type {
		case certificatesv1.PodCertificateRequestConditionTypeIssued, certificatesv1.PodCertificateRequestConditionTypeDenied,
			certificatesv1.PodCertificateRequestConditionTypeFailed:
			return true
		}
	}
	return false
}

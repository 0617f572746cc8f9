package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

var unitGVR = holdfastv1.GroupVersion.WithResource("units").GroupResource()
var unitGK = holdfastv1.GroupVersion.WithKind("Unit").GroupKind()

// unitFacts is the cluster state the Unit rules need.
type unitFacts struct {
	// Nodes are every Node, read when the targets or a failover request
	// changed; nil otherwise.
	Nodes []corev1.Node
	// Running is the binding's runtime process (nil: no runtime pod), read
	// when a fence confirmation or a failover request is judged: the
	// process a confirmation must name.
	Running *holdfastv1.RuntimeIncarnation
}

// unitChange is what a Unit request changes, which decides what is read and
// which rules run.
type unitChange struct {
	spec, failoverTo, confirm, restart, status bool
}

func unitChanges(old, u *holdfastv1.Unit) unitChange {
	var oldAnn map[string]string
	var c unitChange
	if old == nil {
		c.spec = true
		c.status = u.Status.RuntimeBinding != nil
	} else {
		oldAnn = old.Annotations
		c.spec = !equality.Semantic.DeepEqual(old.Spec, u.Spec)
		c.status = !equality.Semantic.DeepEqual(old.Status.RuntimeBinding, u.Status.RuntimeBinding)
	}
	// Only a request (set or changed) is judged: clearing one cancels it.
	set := func(k string) bool {
		v, ok := u.Annotations[k]
		return ok && v != "" && (oldAnn == nil || oldAnn[k] != v)
	}
	c.failoverTo = set(holdfastv1.AnnotationFailoverTo)
	// A new epoch or process under the same words is a new certification.
	c.confirm = set(holdfastv1.AnnotationFailoverConfirmFenced) ||
		(u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced] != "" &&
			(set(holdfastv1.AnnotationFailoverConfirmEpoch) || set(holdfastv1.AnnotationFailoverConfirmIncarnation)))
	c.restart = set(holdfastv1.AnnotationRestart)
	return c
}

func (c unitChange) needsNodes(u *holdfastv1.Unit) bool {
	return c.failoverTo || (c.spec && u.Spec.Availability.Targets != nil)
}

// needsRunning: the rules read the runtime process a confirmation names.
func (c unitChange) needsRunning() bool {
	return c.confirm || c.failoverTo
}

func bindingEpoch(u *holdfastv1.Unit) int64 {
	if u == nil || u.Status.RuntimeBinding == nil {
		return 0
	}
	return u.Status.RuntimeBinding.Epoch
}

// checkUnit applies the Unit rules of docs/design.md §3 and §7 to a create (old nil)
// or an update of the Unit or its status.
func checkUnit(o *Options, r requester, old, u *holdfastv1.Unit, f unitFacts) (verdict, []audit.Record) {
	var v verdict
	c := unitChanges(old, u)
	isController := r.User == o.Controller
	avPath := field.NewPath("spec", "availability")
	annPath := field.NewPath("metadata", "annotations")
	bindPath := field.NewPath("status", "runtimeBinding")

	if old == nil {
		for _, e := range policy.UnitNameErrors(u.Name) {
			v.invalidf(e)
		}
	}
	if c.spec {
		for _, e := range policy.AvailabilityErrors(avPath, &u.Spec.Availability) {
			v.invalidf(e)
		}
		for _, e := range policy.TargetsIncludingPrimary(u, f.Nodes) {
			v.invalidf(e)
		}
		// An edit of a unit admitted below a floor raised since is refused
		// until it raises the lease too (L14).
		if e := policy.LeaseFloorError(avPath, &u.Spec.Availability, o.Grantor); e != nil {
			v.invalidf(e)
		}
		if old != nil && old.Spec.Availability.Mode == holdfastv1.Failover && u.Spec.Availability.Mode == holdfastv1.Autonomy && policy.RebindPending(old) {
			v.forbid(field.Forbidden(avPath.Child("mode"), fmt.Sprintf(
				"a re-bind is pending (%s); switch to Autonomy once the new runtime holds its lease", pendingReason(old))))
		}
	}

	// The epoch is the fencing token and leaseEstablishedBy is written once
	// per binding; only the controller, which owns both, may break that.
	if c.status && old != nil && !isController {
		oe, ne := bindingEpoch(old), bindingEpoch(u)
		if ne < oe {
			v.forbid(field.Forbidden(bindPath.Child("epoch"), fmt.Sprintf(
				"may not go backwards (from %d to %d): the epoch is the fencing token every runtime and device checks", oe, ne)))
		}
		if ob := old.Status.RuntimeBinding; ob != nil && ob.LeaseEstablishedBy != nil && ne == oe {
			var nb *holdfastv1.RuntimeIncarnation
			if u.Status.RuntimeBinding != nil {
				nb = u.Status.RuntimeBinding.LeaseEstablishedBy
			}
			if !equality.Semantic.DeepEqual(ob.LeaseEstablishedBy, nb) {
				v.forbid(field.Forbidden(bindPath.Child("leaseEstablishedBy"), fmt.Sprintf(
					"is written once per binding and already names pod %s restart %d at epoch %d",
					ob.LeaseEstablishedBy.PodUID, ob.LeaseEstablishedBy.RestartCount, oe)))
			}
		}
		checkPromiseRecord(&v, bindPath, old, u)
	}

	var audits []audit.Record
	ref := audit.Unit(u.Namespace, u.Name)
	confirm, stale := policy.ConfirmedFence(u, f.Running)
	if c.confirm {
		p := annPath.Key(holdfastv1.AnnotationFailoverConfirmFenced)
		switch {
		case strings.TrimSpace(u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced]) == "":
			v.invalidf(field.Invalid(p, u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced], "must say how the old node was fenced"))
		case !isController && !inAnyGroup(r.Groups, o.ConfirmFencedGroups):
			v.forbid(field.Forbidden(p, groupsNeeded("confirm a fence", r, o.ConfirmFencedGroups)))
		case stale != nil:
			v.invalidf(field.Invalid(annPath.Key(stale.Annotation), u.Annotations[stale.Annotation], stale.Reason))
		default:
			audits = append(audits, audit.Record{Reason: AuditConfirmFenced, Object: ref, Message: confirm,
				Node: u.Annotations[holdfastv1.AnnotationFailoverTo]})
		}
	}
	if c.failoverTo {
		target := u.Annotations[holdfastv1.AnnotationFailoverTo]
		p := annPath.Key(holdfastv1.AnnotationFailoverTo)
		before := len(v.invalid) + len(v.forbidden)
		if msgs := validation.IsDNS1123Subdomain(target); len(msgs) > 0 {
			v.invalidf(field.Invalid(p, target, "not a node name: "+msgs[0]))
		} else {
			checkFailoverTarget(&v, p, u, target, f.Nodes)
		}
		if !isController && !inAnyGroup(r.Groups, o.FailoverGroups) {
			v.forbid(field.Forbidden(p, groupsNeeded("request a manual failover", r, o.FailoverGroups)))
		}
		if b := u.Status.RuntimeBinding; confirm == "" && b != nil && b.Node != "" {
			switch {
			case u.Spec.Availability.Mode != holdfastv1.Failover:
				v.forbid(field.Forbidden(p, fmt.Sprintf(
					"the runtime on %s is an Autonomy runtime and never fences itself; set %s to how %s was fenced",
					b.Node, policy.ConfirmAnnotations(b.Epoch, f.Running), b.Node)))
			case b.LeaseState == holdfastv1.LeaseHeld:
				v.forbid(field.Forbidden(p, fmt.Sprintf(
					"the runtime on %s still holds its control lease (Held at epoch %d); set %s to how %s was fenced, or wait for the lease to expire",
					b.Node, b.Epoch, policy.ConfirmAnnotations(b.Epoch, f.Running), b.Node)))
			}
		}
		if len(v.invalid)+len(v.forbidden) == before {
			audits = append(audits, audit.Record{Reason: AuditManualFailover, Object: ref, Node: target, Message: confirm})
		}
	}
	if c.restart {
		p := annPath.Key(holdfastv1.AnnotationRestart)
		if _, err := time.Parse(time.RFC3339, u.Annotations[holdfastv1.AnnotationRestart]); err != nil {
			v.invalidf(field.Invalid(p, u.Annotations[holdfastv1.AnnotationRestart], "must be an RFC 3339 time, e.g. 2026-11-29T20:15:00Z"))
		}
	}
	if c.restart && !isController {
		audits = append(audits, audit.Record{Reason: AuditRestart, Object: ref, Message: u.Annotations[holdfastv1.AnnotationRestart]})
	}
	if !v.allowed() {
		return v, nil
	}
	for i := range audits {
		audits[i].RequestID = u.Annotations[holdfastv1.AnnotationRequestID]
	}
	return v, audits
}

func checkFailoverTarget(v *verdict, p *field.Path, u *holdfastv1.Unit, target string, nodes []corev1.Node) {
	var n *corev1.Node
	for i := range nodes {
		if nodes[i].Name == target {
			n = &nodes[i]
		}
	}
	if n == nil {
		v.forbid(field.Forbidden(p, fmt.Sprintf("node %s does not exist", target)))
		return
	}
	if b := u.Status.RuntimeBinding; b != nil && b.Node == target {
		v.forbid(field.Forbidden(p, fmt.Sprintf("%s is the node the runtime is bound to now; name a failover target", target)))
	}
	if !policy.EligibleTarget(u, n) {
		v.forbid(field.Forbidden(p, fmt.Sprintf("%s is not a failover target of this unit (spec.availability.targets)", target)))
	}
	if !policy.NodeReady(n) {
		v.forbid(field.Forbidden(p, fmt.Sprintf("%s is NotReady; name a Ready target", target)))
	}
}

func pendingReason(u *holdfastv1.Unit) string {
	if b := u.Status.RuntimeBinding; b != nil && b.LeaseState == holdfastv1.LeaseExpired {
		return fmt.Sprintf("lease Expired at epoch %d", b.Epoch)
	}
	return "the controller holds off after a leadership change"
}

func groupsNeeded(what string, r requester, allowed []string) string {
	return fmt.Sprintf("user %s may not %s: requires membership in one of the groups [%s]",
		r.describe(), what, strings.Join(allowed, ", "))
}

// UnitValidator guards Units: §3's inequalities, targets, manual failover and
// the binding's epoch.
type UnitValidator struct {
	Options *Options
	Reader  client.Reader
	Audit   *auditLog
}

var _ admission.Validator[*holdfastv1.Unit] = &UnitValidator{}

func (uv *UnitValidator) ValidateCreate(ctx context.Context, u *holdfastv1.Unit) (admission.Warnings, error) {
	return uv.validate(ctx, nil, u)
}

func (uv *UnitValidator) ValidateUpdate(ctx context.Context, old, u *holdfastv1.Unit) (admission.Warnings, error) {
	return uv.validate(ctx, old, u)
}

func (uv *UnitValidator) ValidateDelete(context.Context, *holdfastv1.Unit) (admission.Warnings, error) {
	return nil, nil
}

func (uv *UnitValidator) validate(ctx context.Context, old, u *holdfastv1.Unit) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	var f unitFacts
	if unitChanges(old, u).needsNodes(u) {
		var nodes corev1.NodeList
		if err := uv.Reader.List(ctx, &nodes); err != nil {
			return nil, readFailed("listing Nodes", err)
		}
		f.Nodes = nodes.Items
	}
	if b := u.Status.RuntimeBinding; b != nil && b.Pod != "" && unitChanges(old, u).needsRunning() {
		var pod corev1.Pod
		switch err := uv.Reader.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: b.Pod}, &pod); {
		case err == nil:
			f.Running = policy.IncarnationOf(&pod)
		case !apierrors.IsNotFound(err):
			return nil, readFailed("reading the unit's runtime pod", err)
		}
	}
	v, audits := checkUnit(uv.Options, r, old, u, f)
	if err := v.err(unitGVR, unitGK, u.Name); err != nil {
		return nil, err
	}
	return nil, uv.Audit.record(r, audits)
}

package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/policy"
)

var nodeGVR = corev1.SchemeGroupVersion.WithResource("nodes").GroupResource()
var nodeGK = corev1.SchemeGroupVersion.WithKind("Node").GroupKind()

// guardedNodeLabel selects the labels whose change reaches the webhook (the
// configuration's matchConditions say the same in CEL).
func guardedNodeLabel(k string) bool {
	return strings.HasPrefix(k, "holdfast.io/") || k == holdfastv1.LabelEtcdRole || k == holdfastv1.LabelControlPlaneRole
}

func holdfastKey(k string) bool { return strings.HasPrefix(k, "holdfast.io/") }

// controllerOnlyKey: the desired role and the role-* step annotations drive
// the node plugin's role switch; only the voter controller writes them.
func controllerOnlyKey(k string) bool {
	return k == holdfastv1.LabelDesiredRole || strings.HasPrefix(k, "holdfast.io/role-")
}

// nodeFacts is the cluster state the node rules need; the validator reads
// only what the change calls for.
type nodeFacts struct {
	// Members are the etcd members by VoterPolicy status.
	Members map[string]bool
	// RunningSwaps names the unfinished VoterSwaps that name this node.
	RunningSwaps []string
	// SwapLease is the swap Lease, nil when absent.
	SwapLease *coordinationv1.Lease
	Now       time.Time
}

// nodeNeeds says which facts a change calls for.
type nodeNeeds struct{ members, swaps, lease bool }

func needsForNode(old, newN *corev1.Node) nodeNeeds {
	var n nodeNeeds
	if old == nil {
		return n
	}
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole} {
		if _, had := old.Labels[k]; had {
			if _, has := newN.Labels[k]; !has {
				n.members = true
			}
		}
	}
	if ov, had := old.Labels[holdfastv1.LabelVoterEligible]; had && ov != newN.Labels[holdfastv1.LabelVoterEligible] {
		n.swaps = true
	}
	n.lease = outOfServiceAdded(old, newN) >= 0
	return n
}

// outOfServiceAdded is the index of an out-of-service taint the new Node has
// and the old one did not, or -1.
func outOfServiceAdded(old, newN *corev1.Node) int {
	for _, t := range oldTaints(old) {
		if t.Key == corev1.TaintNodeOutOfService {
			return -1
		}
	}
	for i, t := range newN.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return i
		}
	}
	return -1
}

func oldTaints(n *corev1.Node) []corev1.Taint {
	if n == nil {
		return nil
	}
	return n.Spec.Taints
}

// checkNode applies the Node rules of docs/design.md §7 to a create (old nil) or an
// update.
func checkNode(o *Options, r requester, old, newN *corev1.Node, f nodeFacts) (verdict, []audit.Record) {
	v, audits := checkNodeReports(o, r, old, newN)
	var oldLabels, oldAnn map[string]string
	if old != nil {
		oldLabels, oldAnn = old.Labels, old.Annotations
	}
	labels := changedKeys(oldLabels, newN.Labels, guardedNodeLabel)
	anns := changedKeys(oldAnn, newN.Annotations, holdfastKey)
	labelPath := field.NewPath("metadata", "labels")
	annPath := field.NewPath("metadata", "annotations")
	// The voters role alone drives role switches (not the units role: a
	// role label moves an etcd voter).
	isVoters := r.User == o.VotersUser()
	for _, k := range labels {
		if controllerOnlyKey(k) && !isVoters {
			v.forbid(field.Forbidden(labelPath.Key(k), fmt.Sprintf(
				"only the holdfast voter controller (%s) may change it: the voter controller sets the desired role during a swap; create a VoterSwap instead", o.VotersUser())))
		}
	}
	for _, k := range anns {
		if controllerOnlyKey(k) && !isVoters {
			v.forbid(field.Forbidden(annPath.Key(k), fmt.Sprintf(
				"only the holdfast voter controller (%s) may change it: role steps belong to the swap in progress", o.VotersUser())))
		}
	}
	if val, ok := newN.Labels[holdfastv1.LabelDesiredRole]; ok && containsKey(labels, holdfastv1.LabelDesiredRole) &&
		val != holdfastv1.RoleServer && val != holdfastv1.RoleAgent {
		v.invalidf(field.NotSupported(labelPath.Key(holdfastv1.LabelDesiredRole), val, []string{holdfastv1.RoleServer, holdfastv1.RoleAgent}))
	}
	if val, ok := newN.Annotations[holdfastv1.AnnotationRoleStep]; ok && containsKey(anns, holdfastv1.AnnotationRoleStep) {
		steps := policy.RoleSteps()
		if !containsKey(steps, val) {
			v.invalidf(field.NotSupported(annPath.Key(holdfastv1.AnnotationRoleStep), val, steps))
		}
	}

	// A member's role labels go only after the member is gone.
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole} {
		if _, had := oldLabels[k]; had {
			if _, has := newN.Labels[k]; !has && f.Members[newN.Name] {
				v.forbid(field.Forbidden(labelPath.Key(k), fmt.Sprintf(
					"node %s is still an etcd member (VoterPolicy %s status); a VoterSwap removes the member first and then clears this label",
					newN.Name, holdfastv1.VoterPolicyName)))
			}
		}
	}

	// A running swap's nodes keep their eligibility until it finishes.
	if ov, had := oldLabels[holdfastv1.LabelVoterEligible]; had && ov != newN.Labels[holdfastv1.LabelVoterEligible] && len(f.RunningSwaps) > 0 {
		v.forbid(field.Forbidden(labelPath.Key(holdfastv1.LabelVoterEligible), fmt.Sprintf(
			"node %s is in the running VoterSwap %s; change it after the swap finishes", newN.Name, strings.Join(f.RunningSwaps, ", "))))
	}

	// A node plugin writes holdfast keys on its own Node only.
	if r.User == o.NodePlugin && len(changedKeys(oldLabels, newN.Labels, holdfastKey))+len(anns) > 0 {
		own := r.nodeName()
		switch {
		case own == "":
			v.forbid(field.Forbidden(field.NewPath("metadata"), fmt.Sprintf(
				"the node plugin must use a pod-bound service account token (user extra %s names its node)", serviceaccount.NodeNameKey)))
		case own != newN.Name:
			for _, k := range changedKeys(oldLabels, newN.Labels, holdfastKey) {
				v.forbid(field.Forbidden(labelPath.Key(k), fmt.Sprintf(
					"the node plugin on node %s may write holdfast keys only on its own Node, not on %s", own, newN.Name)))
			}
			for _, k := range anns {
				v.forbid(field.Forbidden(annPath.Key(k), fmt.Sprintf(
					"the node plugin on node %s may write holdfast annotations only on its own Node, not on %s", own, newN.Name)))
			}
		}
	}

	// Node recovery must not force a swap's node out of service.
	if i := outOfServiceAdded(old, newN); i >= 0 && old != nil && policy.SwapLeaseNames(f.SwapLease, newN.Name, f.Now) {
		until := "with no expiry"
		if exp, ok := policy.SwapLeaseExpiry(f.SwapLease); ok {
			until = "until " + exp.UTC().Format(time.RFC3339)
		}
		v.forbid(field.Forbidden(field.NewPath("spec", "taints").Index(i), fmt.Sprintf(
			"node %s is in voter swap %s (swap Lease %s/%s held by %s %s); taint it out of service after the swap finishes or the Lease expires",
			newN.Name, f.SwapLease.Annotations[holdfastv1.AnnotationSwapID], holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName,
			policy.SwapLeaseHolder(f.SwapLease), until)))
	}
	return v, audits
}

// checkNodeReports keeps a node plugin's reports of its host (the role
// label; the actuator, provisioned, tombstone and fitness annotations) its
// own: the voter controller trusts them to step a member down, remove it
// and finish its demotion, so a forged or stale one (an admin, a GitOps
// tool re-applying old annotations) could have it remove a member whose
// host never stepped down. Only that node's plugin writes them (the node
// plugin's own-Node rule is checkNode's); the voter controller may clear
// them; a person in the report-repair groups may clear them too, giving a
// reason in holdfast.io/report-repair (break-glass, audited); anyone else
// is refused.
func checkNodeReports(o *Options, r requester, old, newN *corev1.Node) (verdict, []audit.Record) {
	var v verdict
	var oldLabels, oldAnn map[string]string
	if old != nil {
		oldLabels, oldAnn = old.Labels, old.Annotations
	}
	labelPath := field.NewPath("metadata", "labels")
	annPath := field.NewPath("metadata", "annotations")
	type change struct {
		path    *field.Path
		removed bool
	}
	var changes []change
	for _, k := range changedKeys(oldLabels, newN.Labels, func(k string) bool { return holdfastv1.IsNodeReport(k, true) }) {
		_, has := newN.Labels[k]
		changes = append(changes, change{labelPath.Key(k), !has})
	}
	for _, k := range changedKeys(oldAnn, newN.Annotations, func(k string) bool { return holdfastv1.IsNodeReport(k, false) }) {
		_, has := newN.Annotations[k]
		changes = append(changes, change{annPath.Key(k), !has})
	}
	reason := newN.Annotations[holdfastv1.AnnotationReportRepair]
	reasonSet := reason != "" && reason != oldAnn[holdfastv1.AnnotationReportRepair]
	repairer := inAnyGroup(r.Groups, o.ReportRepairGroups)
	if containsKey(changedKeys(oldAnn, newN.Annotations, holdfastKey), holdfastv1.AnnotationReportRepair) && !repairer && r.User != o.VotersUser() {
		v.forbid(field.Forbidden(annPath.Key(holdfastv1.AnnotationReportRepair), groupsNeeded("repair a node report", r, o.ReportRepairGroups)))
	}
	if r.User == o.NodePlugin {
		return v, nil
	}
	var repaired []string
	for _, c := range changes {
		switch {
		case c.removed && r.User == o.VotersUser():
		case c.removed && repairer && reasonSet:
			repaired = append(repaired, c.path.String())
		case c.removed && repairer:
			v.forbid(field.Forbidden(c.path, fmt.Sprintf(
				"node %s's plugin reports it; a repair removes it only with the reason in %s set in the same request (docs/voter-swap.md, break-glass)",
				newN.Name, holdfastv1.AnnotationReportRepair)))
		default:
			v.forbid(field.Forbidden(c.path, fmt.Sprintf(
				"only the node plugin on node %s writes it (its report of the host), and only the voter controller (%s) clears it; "+
					"to repair one, a member of [%s] removes it with a reason in %s (docs/voter-swap.md, break-glass)",
				newN.Name, o.VotersUser(), strings.Join(o.ReportRepairGroups, ", "), holdfastv1.AnnotationReportRepair)))
		}
	}
	if len(repaired) == 0 || !v.allowed() {
		return v, nil
	}
	return v, []audit.Record{{Reason: AuditReportRepair, Object: &audit.Object{Kind: "Node", Name: newN.Name},
		Message: reason + " (removed " + strings.Join(repaired, ", ") + ")"}}
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// NodeValidator guards role labels, role annotations and the out-of-service
// taint on Nodes.
type NodeValidator struct {
	Options *Options
	Audit   *auditLog
	// Reader reads the apiserver directly: a cached view could miss a swap
	// that just started.
	Reader client.Reader
}

var _ admission.Validator[*corev1.Node] = &NodeValidator{}

func (nv *NodeValidator) ValidateCreate(ctx context.Context, n *corev1.Node) (admission.Warnings, error) {
	return nv.validate(ctx, nil, n)
}

func (nv *NodeValidator) ValidateUpdate(ctx context.Context, old, n *corev1.Node) (admission.Warnings, error) {
	return nv.validate(ctx, old, n)
}

func (nv *NodeValidator) ValidateDelete(context.Context, *corev1.Node) (admission.Warnings, error) {
	return nil, nil
}

func (nv *NodeValidator) validate(ctx context.Context, old, n *corev1.Node) (admission.Warnings, error) {
	r, err := requesterFrom(ctx)
	if err != nil {
		return nil, err
	}
	f, err := nv.facts(ctx, needsForNode(old, n), n.Name)
	if err != nil {
		return nil, readFailed("reading what the change depends on", err)
	}
	v, audits := checkNode(nv.Options, r, old, n, f)
	if err := v.err(nodeGVR, nodeGK, n.Name); err != nil {
		return nil, err
	}
	return nil, nv.Audit.record(r, audits)
}

func (nv *NodeValidator) facts(ctx context.Context, need nodeNeeds, node string) (nodeFacts, error) {
	f := nodeFacts{Now: nv.Options.Now()}
	if need.members {
		p, err := getVoterPolicy(ctx, nv.Reader)
		if err != nil {
			return f, err
		}
		f.Members = policy.Members(p)
	}
	if need.swaps {
		var swaps holdfastv1.VoterSwapList
		if err := nv.Reader.List(ctx, &swaps); err != nil {
			return f, fmt.Errorf("listing VoterSwaps: %w", err)
		}
		for i := range swaps.Items {
			s := &swaps.Items[i]
			if !s.Status.Phase.Finished() && (s.Spec.Outgoing == node || s.Spec.Incoming == node || s.Status.Incoming == node) {
				f.RunningSwaps = append(f.RunningSwaps, s.Name)
			}
		}
	}
	if need.lease {
		l, err := getSwapLease(ctx, nv.Reader)
		if err != nil {
			return f, err
		}
		f.SwapLease = l
	}
	return f, nil
}

func getVoterPolicy(ctx context.Context, r client.Reader) (*holdfastv1.VoterPolicy, error) {
	var p holdfastv1.VoterPolicy
	if err := r.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading VoterPolicy %s: %w", holdfastv1.VoterPolicyName, err)
	}
	return &p, nil
}

func getSwapLease(ctx context.Context, r client.Reader) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	if err := r.Get(ctx, client.ObjectKey{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the swap Lease: %w", err)
	}
	return &l, nil
}

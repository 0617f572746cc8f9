package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// GateInput is the cluster as the voter controller last reported it: the
// VoterPolicy status (etcd's own view of its members), the Nodes and the
// swap Lease.
type GateInput struct {
	// Policy is the singleton VoterPolicy; nil when it does not exist.
	Policy *holdfastv1.VoterPolicy
	// Nodes by name.
	Nodes map[string]*corev1.Node
	// SwapLease is kube-system/holdfast-voter-swap; nil when absent.
	SwapLease *coordinationv1.Lease
	// Now is the clock the Lease's expiry and the status's age are judged
	// against.
	Now time.Time
}

// Members are the nodes whose etcd members vote or learn, by etcd's own
// member list as VoterPolicy status reports it.
func Members(p *holdfastv1.VoterPolicy) map[string]bool {
	m := map[string]bool{}
	if p == nil {
		return m
	}
	for _, n := range p.Status.Voters {
		m[n] = true
	}
	for _, n := range p.Status.Learners {
		m[n] = true
	}
	return m
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeProvisioned reports whether the node plugin found the server unit
// installed (the provisioned annotation, not "false").
func NodeProvisioned(n *corev1.Node) bool {
	v, ok := n.Annotations[holdfastv1.AnnotationProvisioned]
	return ok && v != "" && v != "false"
}

// NodeReportedNotProvisioned reports whether the node plugin said the host
// is not provisioned (the provisioned annotation "false"). A voter may lack
// the annotation (its node plugin never reported, or predates it): only its
// own report refuses its step-down.
func NodeReportedNotProvisioned(n *corev1.Node) bool {
	return n.Annotations[holdfastv1.AnnotationProvisioned] == "false"
}

// NodeEligible reports whether the node may become a voter: it matches the
// policy's eligibleSelector (holdfast.io/voter-eligible=true when unset).
// A selector that does not parse makes no node eligible.
func NodeEligible(p *holdfastv1.VoterPolicy, n *corev1.Node) bool {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{holdfastv1.LabelVoterEligible: "true"}}
	if p != nil && p.Spec.EligibleSelector != nil {
		sel = p.Spec.EligibleSelector
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(n.Labels))
}

// NodePinned reports whether an admin pinned the node (no swap in or out).
func NodePinned(n *corev1.Node) bool {
	v, ok := n.Labels[holdfastv1.LabelPinned]
	return ok && v != "false"
}

// TombstoneOfCluster reports whether the node carries a tombstone of the
// etcd cluster clusterID: its removed member must never come back as a
// server of that cluster (docs/design.md §6). A tombstone that does not parse or
// names no cluster, or any tombstone while clusterID is not yet known,
// counts as one of this cluster: a removed member never comes back by doubt.
// The swap gates, the voter controller and holdfast-scheduler's
// VoterEligibility all judge tombstones with this one function.
func TombstoneOfCluster(n *corev1.Node, clusterID string) bool {
	v, ok := n.Annotations[holdfastv1.AnnotationTombstone]
	if !ok {
		return false
	}
	t, err := holdfastv1.ParseTombstone(v)
	return err != nil || t.ClusterID == "" || clusterID == "" || t.ClusterID == clusterID
}

// StatusHeartbeat is how often, at the least, the voter controller stamps
// VoterPolicy status.observedTime while it runs (each pass stamps it when it
// is half this old; a pass runs at least this often).
const StatusHeartbeat = 15 * time.Second

// MaxStatusAge is how old VoterPolicy status.observedTime may be for the
// gates to trust the status: four heartbeats, so a slow pass or two (an etcd
// probe waiting out its timeouts) never refuses a swap, while a voters role
// that lost its election or cannot reach the apiserver does within a minute.
const MaxStatusAge = 4 * StatusHeartbeat

// StatusFresh judges VoterPolicy status.observedTime at now: nil when the
// status was observed within MaxStatusAge, else why the status cannot be
// trusted. A status never stamped (no voters role has observed etcd, or one
// from before observedTime) is not trusted either, nor one stamped further
// in the future than MaxStatusAge (the clocks disagree).
func StatusFresh(p *holdfastv1.VoterPolicy, now time.Time) *field.Error {
	path := field.NewPath("status", "observedTime")
	t := p.Status.ObservedTime
	if t == nil {
		return field.Forbidden(path, "voter policy status carries no observation time; the voters role has not observed etcd (or predates observedTime)")
	}
	age := now.Sub(t.Time)
	switch {
	case age > MaxStatusAge:
		return field.Forbidden(path, fmt.Sprintf("voter policy status is %v old; the voters role is not observing etcd (its status may be at most %v old)",
			age.Round(time.Second), MaxStatusAge))
	case -age > MaxStatusAge:
		return field.Forbidden(path, fmt.Sprintf("voter policy status is stamped %v in the future; the voters role's clock and this one disagree",
			(-age).Round(time.Second)))
	}
	return nil
}

// SwapGates lists every gate of docs/design.md §6 step 1 that the swap fails now, as
// VoterPolicy status and the Nodes show them, each at the field it is about
// (spec for the cluster's own health). An empty list means every gate holds.
// The webhook, the voter controller (on the status it just computed from
// etcd), holdfast-scheduler and kubectl holdfast swap all judge a swap with
// this one function.
func SwapGates(spec *holdfastv1.VoterSwapSpec, in GateInput) field.ErrorList {
	var errs field.ErrorList
	specPath := field.NewPath("spec")
	p := in.Policy
	if p == nil {
		return append(errs, field.Forbidden(specPath, fmt.Sprintf(
			"no VoterPolicy %q: create it so the voter controller observes etcd before any swap", holdfastv1.VoterPolicyName)))
	}
	st := &p.Status
	// Every gate below reads this status: one nobody refreshed says nothing
	// about etcd now (a paused member of the apiserver's own etcd can keep
	// the voters role from its election while EtcdHealthy stays True).
	if err := StatusFresh(p, in.Now); err != nil {
		errs = append(errs, err)
	}

	if c := meta.FindStatusCondition(st.Conditions, holdfastv1.ConditionEtcdHealthy); c == nil || c.Status != metav1.ConditionTrue {
		why := "not yet reported"
		if c != nil {
			why = fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf(
			"etcd is not healthy (VoterPolicy condition %s %s); swap once every voter answers", holdfastv1.ConditionEtcdHealthy, why)))
	}
	if st.Leader == "" {
		errs = append(errs, field.Forbidden(specPath, "etcd reports no leader; swap once it has one"))
	}
	if len(st.Learners) > 0 {
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf(
			"learner present (%s); wait until it is promoted or removed", strings.Join(st.Learners, ", "))))
	}
	if target := p.Spec.TargetVoters; target != 0 && int32(len(st.Voters)) != target {
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf(
			"%d voters where the target is %d; the voter set must be at its target before a swap", len(st.Voters), target)))
	}
	for _, v := range st.Voters {
		n := in.Nodes[v]
		switch {
		case n == nil:
			errs = append(errs, field.Forbidden(specPath, fmt.Sprintf("voter %s has no Node of that name (holdfast knows a voter by its etcd member name, which must be its Node's name); swap once every voter's Node is Ready", v)))
		case !NodeReady(n):
			errs = append(errs, field.Forbidden(specPath, fmt.Sprintf("voter %s is not Ready; swap once every voter's Node is Ready", v)))
		}
	}
	errs = append(errs, labelledNotVoting(specPath, st, in.Nodes)...)
	if SwapLeaseHeld(in.SwapLease, in.Now) {
		until := "with no expiry"
		if exp, ok := SwapLeaseExpiry(in.SwapLease); ok {
			until = "until " + exp.UTC().Format(time.RFC3339)
		}
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf("the swap Lease %s/%s is held by %s %s; one swap at a time",
			holdfastv1.SwapLeaseNamespace, holdfastv1.SwapLeaseName, SwapLeaseHolder(in.SwapLease), until)))
	}

	outPath := specPath.Child("outgoing")
	if _, ok := in.Nodes[spec.Outgoing]; !ok {
		errs = append(errs, field.Forbidden(outPath, fmt.Sprintf("node %s does not exist", spec.Outgoing)))
	}
	if !slices.Contains(st.Voters, spec.Outgoing) {
		errs = append(errs, field.Forbidden(outPath, fmt.Sprintf("%s is not an etcd voter (voters: %s); name a current voter",
			spec.Outgoing, listOrNone(st.Voters))))
	}
	if n := in.Nodes[spec.Outgoing]; n != nil && NodePinned(n) {
		errs = append(errs, field.Forbidden(outPath, fmt.Sprintf("%s is pinned (%s); an admin must unpin it first",
			spec.Outgoing, holdfastv1.LabelPinned)))
	}
	if n := in.Nodes[spec.Outgoing]; n != nil && NodeReportedNotProvisioned(n) {
		errs = append(errs, field.Forbidden(outPath, fmt.Sprintf(
			"%s: its node plugin reports the host not provisioned (%s \"false\"), so its step-down could stall the swap with the member still voting; "+
				"the reason is in the %s Event on Node %s and holdfast-node's log there: fix the host first",
			spec.Outgoing, holdfastv1.AnnotationProvisioned, holdfastv1.EventReasonNotProvisioned, spec.Outgoing)))
	}

	if spec.Incoming == "" {
		return errs
	}
	inPath := specPath.Child("incoming")
	n := in.Nodes[spec.Incoming]
	if n == nil {
		return append(errs, field.Forbidden(inPath, fmt.Sprintf("node %s does not exist", spec.Incoming)))
	}
	if Members(p)[spec.Incoming] {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s is already an etcd member; name a node that is not", spec.Incoming)))
	}
	if !NodeEligible(p, n) {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s is not voter-eligible (VoterPolicy eligibleSelector); an admin labels eligible nodes",
			spec.Incoming)))
	}
	if NodePinned(n) {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s is pinned (%s); an admin must unpin it first", spec.Incoming, holdfastv1.LabelPinned)))
	}
	if TombstoneOfCluster(n, st.ClusterID) {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s carries a tombstone of this cluster (%s): its removed member is not finished to an agent yet",
			spec.Incoming, holdfastv1.AnnotationTombstone)))
	}
	if !NodeProvisioned(n) {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s is not provisioned (no %s annotation from its node plugin); install the server unit first",
			spec.Incoming, holdfastv1.AnnotationProvisioned)))
	}
	if !NodeReady(n) {
		errs = append(errs, field.Forbidden(inPath, fmt.Sprintf("%s is not Ready", spec.Incoming)))
	}
	return errs
}

// labelledNotVoting: a node labelled node-role.kubernetes.io/etcd whose
// member does not vote (a learner, or no member at all) is "member but not a
// voter", and blocks: a label is never taken for a vote. Judged only once
// etcd's voters are known.
func labelledNotVoting(path *field.Path, st *holdfastv1.VoterPolicyStatus, nodes map[string]*corev1.Node) field.ErrorList {
	if len(st.Voters) == 0 {
		return nil
	}
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if _, ok := nodes[name].Labels[holdfastv1.LabelEtcdRole]; !ok || slices.Contains(st.Voters, name) {
			continue
		}
		what := "has no etcd member"
		if slices.Contains(st.Learners, name) {
			what = "is a learner"
		}
		errs = append(errs, field.Forbidden(path, fmt.Sprintf(
			"node %s is labelled %s but %s (member but not a voter); a voter is judged by etcd's own vote",
			name, holdfastv1.LabelEtcdRole, what)))
	}
	return errs
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none reported"
	}
	return strings.Join(s, ", ")
}

package voters

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/types"
)

// What a pass reads off Nodes and pods: cordons, role steps, node plugin
// reports, readiness, role labels, the pods a drain waits for or evicts.

// cordoned reports whether a swap cordoned the node (its taint, with the swap
// ID when swapID is not empty).
func cordoned(n *corev1.Node, swapID string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == holdfastv1.TaintVoterSwap && (swapID == "" || t.Value == swapID) {
			return n.Spec.Unschedulable
		}
	}
	return false
}

// roleStepIs reports whether the node holds the swap's role step with the
// desired role the step goes with (policy's role-step table).
func roleStepIs(n *corev1.Node, swapID, step string) bool {
	desired, _ := policy.RoleForStep(step)
	return n.Labels[holdfastv1.LabelDesiredRole] == desired && n.Annotations[holdfastv1.AnnotationRoleSwap] == swapID &&
		n.Annotations[holdfastv1.AnnotationRoleStep] == step
}

func reportOf(n *corev1.Node) *holdfastv1.ActuatorReport {
	if n == nil {
		return nil
	}
	return holdfastv1.ActuatorReportOf(n.Annotations)
}

func reportIs(r *holdfastv1.ActuatorReport, swapID, step, phase string) bool {
	return r != nil && r.Swap == swapID && r.Step == step && r.Phase == phase
}

func describeReport(r *holdfastv1.ActuatorReport) string {
	if r == nil {
		return "no report yet"
	}
	s := fmt.Sprintf("last report %s %s for swap %s", r.Step, r.Phase, r.Swap)
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// readyAfter: the Node is Ready on a heartbeat after t.
func readyAfter(n *corev1.Node, t time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(t)
		}
	}
	return false
}

// readyHeartbeat is the Node's Ready condition's last heartbeat (zero
// without one).
func readyHeartbeat(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// etcdAnnotationPrefix marks k3s's etcd annotations on a server's Node.
const etcdAnnotationPrefix = "etcd.k3s.cattle.io/"

func hasRoleLabels(n *corev1.Node) bool {
	for _, k := range []string{holdfastv1.LabelEtcdRole, holdfastv1.LabelControlPlaneRole, holdfastv1.LabelMasterRole} {
		if _, ok := n.Labels[k]; ok {
			return true
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, etcdAnnotationPrefix) {
			return true
		}
	}
	return false
}

// joinFor is the role-join annotation: every member as name=peerURL, the
// new one under its node's name.
func joinFor(o *Observation, c *Cluster, in string, id uint64) string {
	var parts []string
	for _, m := range o.Etcd.Members {
		name := m.Name
		if m.ID == id {
			name = in
		}
		if name == "" {
			name = HexID(m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// answering are the client URLs of the members that answer, but skip's.
func answering(c *Cluster, skip string) []string {
	var out []string
	for _, node := range slices.Sorted(maps.Keys(c.ByNode)) {
		m := c.ByNode[node]
		if node != skip && m.Answered && !m.IsLearner {
			out = append(out, m.ClientURLs...)
		}
	}
	return out
}

// classifyPods splits a node's pods: workload pods run to completion (a
// Job's, restartPolicy not Always) or drive plant equipment (a unit
// runtime, which only the unit controller moves): they are waited for,
// never evicted. The rest is evicted, except DaemonSet, mirror and finished
// pods and the voter-candidate pod.
func classifyPods(pods []corev1.Pod, candidate *corev1.Pod) (workload, evictable []corev1.Pod) {
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case candidate != nil && p.Namespace == candidate.Namespace && p.Name == candidate.Name:
		case p.Labels[holdfastv1.LabelRole] == holdfastv1.RoleVoterCandidate:
		case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
		case ownedBy(&p, "DaemonSet"):
		case p.Labels[holdfastv1.LabelUnit] != "" || ownedBy(&p, "Job") || p.Spec.RestartPolicy == corev1.RestartPolicyNever || p.Spec.RestartPolicy == corev1.RestartPolicyOnFailure:
			workload = append(workload, p)
		default:
			evictable = append(evictable, p)
		}
	}
	return workload, evictable
}

func ownedBy(p *corev1.Pod, kind string) bool {
	for _, r := range p.OwnerReferences {
		if r.Kind == kind && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

func podNames(pods []corev1.Pod) string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return strings.Join(names, ", ")
}

func podKeys(pods []corev1.Pod) []types.NamespacedName {
	var out []types.NamespacedName
	for _, p := range pods {
		out = append(out, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	return out
}

func pastDeadline(o *Observation, s *holdfastv1.VoterSwap) bool {
	return s.Status.Deadline != nil && !o.Now.Before(s.Status.Deadline.Time)
}

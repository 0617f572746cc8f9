package voters

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// EtcdView is etcd's own view of its members, as one pass read it: a
// linearizable member list and each member's Status on its own client URL.
type EtcdView struct {
	// Err says why the member list could not be read (no quorum, no
	// endpoint answered); empty when it was.
	Err string
	// ClusterID of the member list's answer.
	ClusterID uint64
	Members   []Member
}

// Member is one etcd member.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
	// Answered: its Status answered within the timeout on its own client URL.
	Answered bool
	// Problem says why it did not answer, or what it reported (Errors).
	Problem string
	// Leader is the leader ID the member reported (0: none).
	Leader uint64
	// Revision is the store revision the member reported.
	Revision int64
}

// Started reports whether the member has started (an unstarted member has
// no name and no client URL yet).
func (m Member) Started() bool { return m.Name != "" || len(m.ClientURLs) > 0 }

// HexID is the member ID as etcdctl prints it.
func HexID(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseHexID reads a member ID printed by HexID.
func ParseHexID(s string) (uint64, bool) {
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil && s != ""
}

// Settings are the voter controller's own settings (flags), beside the
// VoterPolicy's.
type Settings struct {
	// Identity is this process's holder identity on the swap Lease.
	Identity string
	// LeaseDuration of the swap Lease; renewed on every pass.
	LeaseDuration time.Duration
	// PeerPort and PeerScheme build a node's default peer URL from its
	// InternalIP when it carries no AnnotationEtcdPeerURL.
	PeerPort   int
	PeerScheme string
}

// DefaultSettings are the flags' defaults.
func DefaultSettings() Settings {
	return Settings{LeaseDuration: 30 * time.Second, PeerPort: 2380, PeerScheme: "https"}
}

// Observation is everything one pass decides from.
type Observation struct {
	Now      time.Time
	Settings Settings
	// Policy is VoterPolicy default; nil when it does not exist.
	Policy *holdfastv1.VoterPolicy
	// Swaps are every VoterSwap.
	Swaps []holdfastv1.VoterSwap
	// Nodes by name.
	Nodes map[string]*corev1.Node
	// Pods on the nodes of the swap in progress, by node name (for drains).
	Pods map[string][]corev1.Pod
	// Lease is the swap Lease; nil when absent.
	Lease *coordinationv1.Lease
	// Etcd is etcd's view of its members.
	Etcd EtcdView
	// Candidate is the voter-candidate pod of the pending swap, nil when
	// there is none.
	Candidate *corev1.Pod
	// UnfitSince is, per voter node, since when every fitness report seen
	// has been over a threshold (fitness.go).
	UnfitSince map[string]time.Time
	// SnapshotCheck is this process's check of the running swap's
	// recorded snapshot on its own volume, made until one is recorded as
	// verified (SnapshotGuarded steps only); nil when not made this pass.
	SnapshotCheck *SnapshotCheck

	cluster *Cluster
}

// SnapshotCheck is the outcome of VerifySnapshot on the recorded snapshot.
type SnapshotCheck struct {
	// Err says why the file is not the recorded snapshot; empty when it is.
	Err string
}

// Cluster is Assess(o), judged once per observation: a pass reads it for
// the policy status, the fitness history and its decision.
func (o *Observation) Cluster() *Cluster {
	if o.cluster == nil {
		c := Assess(o)
		o.cluster = &c
	}
	return o.cluster
}

// PeerURL is the peer URL a node's member uses: AnnotationEtcdPeerURL, else
// <scheme>://<InternalIP>:<port>. Empty when neither is known.
func (s Settings) PeerURL(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	if u := strings.TrimSpace(n.Annotations[holdfastv1.AnnotationEtcdPeerURL]); u != "" {
		return u
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			scheme, port := s.PeerScheme, s.PeerPort
			if scheme == "" {
				scheme = "https"
			}
			if port == 0 {
				port = 2380
			}
			return scheme + "://" + net.JoinHostPort(a.Address, strconv.Itoa(port))
		}
	}
	return ""
}

// Cluster is the assessed etcd cluster: members mapped to nodes and judged.
type Cluster struct {
	// Reached: the member list was read.
	Reached bool
	Err     string
	// ClusterID in hex.
	ClusterID string
	// Voters and Learners are node names (a member with no node: its hex
	// ID), sorted.
	Voters, Learners []string
	// Leader is the agreed leader's member ID (0: none or no agreement).
	Leader uint64
	// ByNode maps a node name to its member.
	ByNode map[string]Member
	// Problems are what keeps the cluster from being healthy, each a
	// sentence naming the member (EtcdHealthy's message).
	Problems []string
	// Reason is EtcdHealthy's reason when there are problems.
	Reason string
}

// Healthy reports whether every member answers, they agree on a leader, and
// there is no learner and no unstarted member.
func (c *Cluster) Healthy() bool { return c.Reached && len(c.Problems) == 0 }

// NodeOf is the node name of a member: its name, else the node whose peer
// URL it has, else its hex ID.
func (o *Observation) NodeOf(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	for name, n := range o.Nodes {
		if u := o.Settings.PeerURL(n); u != "" && slices.Contains(m.PeerURLs, u) {
			return name
		}
	}
	return HexID(m.ID)
}

// Assess maps the members to nodes and judges their health.
func Assess(o *Observation) Cluster {
	c := Cluster{ByNode: map[string]Member{}}
	if o.Etcd.Err != "" {
		c.Err = o.Etcd.Err
		c.Reason = holdfastv1.SwapReasonMemberListUnavailable
		c.Problems = []string{"the etcd member list could not be read: " + o.Etcd.Err}
		return c
	}
	c.Reached = true
	c.ClusterID = HexID(o.Etcd.ClusterID)
	leaders := map[uint64][]string{}
	var reasons []string
	for _, m := range o.Etcd.Members {
		node := o.NodeOf(m)
		c.ByNode[node] = m
		if m.IsLearner {
			c.Learners = append(c.Learners, node)
		} else {
			c.Voters = append(c.Voters, node)
		}
		switch {
		case !m.Started():
			c.Problems = append(c.Problems, fmt.Sprintf("member %s (%s, peer %s) has not started", HexID(m.ID), node, strings.Join(m.PeerURLs, ",")))
			reasons = append(reasons, holdfastv1.SwapReasonUnstartedMember)
		case !m.Answered:
			what := "voter"
			if m.IsLearner {
				what = "learner"
			}
			c.Problems = append(c.Problems, fmt.Sprintf("%s %s does not answer: %s", what, node, m.Problem))
			reasons = append(reasons, holdfastv1.SwapReasonMemberUnreachable)
		case m.Problem != "":
			c.Problems = append(c.Problems, fmt.Sprintf("member %s reports: %s", node, m.Problem))
			reasons = append(reasons, holdfastv1.SwapReasonMemberReportsErrors)
		}
		if m.IsLearner && m.Started() {
			c.Problems = append(c.Problems, fmt.Sprintf("learner present (%s); a swap waits until it is promoted or removed", node))
			reasons = append(reasons, holdfastv1.SwapReasonLearnerPresent)
		}
		if m.Answered && !m.IsLearner {
			leaders[m.Leader] = append(leaders[m.Leader], node)
		}
	}
	sort.Strings(c.Voters)
	sort.Strings(c.Learners)
	switch {
	case len(leaders) == 1:
		for id := range leaders {
			c.Leader = id
		}
		if c.Leader == 0 {
			c.Problems = append(c.Problems, "etcd reports no leader")
			reasons = append(reasons, holdfastv1.SwapReasonNoLeader)
		}
	case len(leaders) > 1:
		var parts []string
		for id, nodes := range leaders {
			parts = append(parts, fmt.Sprintf("%s say %s", strings.Join(nodes, ","), HexID(id)))
		}
		sort.Strings(parts)
		c.Problems = append(c.Problems, "the voters disagree on the leader: "+strings.Join(parts, "; "))
		reasons = append(reasons, holdfastv1.SwapReasonNoLeader)
	default:
		c.Problems = append(c.Problems, "no voter answers")
		reasons = append(reasons, holdfastv1.SwapReasonMemberUnreachable)
	}
	if len(reasons) > 0 {
		c.Reason = reasons[0]
	}
	return c
}

// LeaderNode is the node of the agreed leader, "" when none.
func (o *Observation) LeaderNode(c *Cluster) string {
	if c.Leader == 0 {
		return ""
	}
	for node, m := range c.ByNode {
		if m.ID == c.Leader {
			return node
		}
	}
	return HexID(c.Leader)
}

// memberByID finds a member by ID.
func (c *Cluster) memberByID(id uint64) (string, Member, bool) {
	for node, m := range c.ByNode {
		if m.ID == id {
			return node, m, true
		}
	}
	return "", Member{}, false
}

package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// SwapPhase is one span of a voter swap: from the record before it to its
// own, and what the controller waited for in between (each record is the
// action a pass took once its condition held). Node rows are the node
// plugin's reports on a swap node: marks on the timeline, with no wait of
// their own.
type SwapPhase struct {
	// Name is the phase's short name (a benchmark metric), "" for a node
	// row.
	Name string
	At   time.Time
	// D is the time since the row before (the swap's creation for the
	// first).
	D time.Duration
	// What is what the span waited for; Record is the history line.
	What, Record string
}

// SwapPhases are a finished swap's spans in time order. Every instant is
// one the cluster recorded, in whole seconds (the API keeps no more): the
// VoterSwap's creation and status history, written by the controller as it
// acts, and the holdfast.io/actuator reports the node plugins left on the
// incoming Node (its promote: the server's start and the report) and on
// the outgoing one (its finish-demote).
type SwapPhases struct {
	Swap   string
	Phases []SwapPhase
	// Total is the swap's creation -> its finish.
	Total time.Duration
}

// swapPhaseNames names the history records a swap that succeeds writes, by
// step and outcome or reason, with what the controller waited for before
// it could write each.
var swapPhaseNames = []struct {
	step       holdfastv1.SwapStep
	key        string
	name, what string
}{
	{holdfastv1.StepGates, "first", "gates", "a pass after the swap's creation, judging every gate"},
	{holdfastv1.StepGates, holdfastv1.SwapReasonGatesPassed, "lease", "the swap Lease taken, every gate again under it"},
	{holdfastv1.StepPromote, holdfastv1.SwapOutcomeStarted, "snapshot", "a snapshot streamed from a voter that stays and verified"},
	{holdfastv1.StepPromote, holdfastv1.SwapReasonCordoned, "cordon-in", "the candidate cordoned and tainted"},
	{holdfastv1.StepPromote, holdfastv1.SwapReasonLearnerAdded, "learner", "the candidate's pods evicted and gone, then the learner added"},
	{holdfastv1.StepPromote, holdfastv1.SwapReasonServerRequested, "promote-asked", "role-step promote set on the candidate's Node"},
	{holdfastv1.StepPromote, holdfastv1.SwapReasonPromoted, "promote", "the node plugin's promote done (server started), the learner started and caught up (etcd accepts the promotion)"},
	{holdfastv1.StepPromote, holdfastv1.SwapOutcomeDone, "voter-ready", "the etcd role label, a Ready heartbeat after the server's start (the kubelet's status report), the uncordon"},
	{holdfastv1.StepRegate, holdfastv1.SwapOutcomeDone, "regate", "every gate with target + 1 voters"},
	{holdfastv1.StepStepDown, holdfastv1.SwapReasonLeaderMoved, "leader-moved", "etcd's leadership moved off the outgoing voter"},
	{holdfastv1.StepStepDown, holdfastv1.SwapReasonCordoned, "cordon-out", "the outgoing node cordoned and tainted"},
	{holdfastv1.StepStepDown, holdfastv1.SwapReasonAgentRequested, "stepdown-asked", "the outgoing node's pods evicted, then role-step step-down set"},
	{holdfastv1.StepStepDown, holdfastv1.SwapOutcomeDone, "stepdown", "the node plugin's step-down done (server held out of serving, role file agent)"},
	{holdfastv1.StepRemoveMember, holdfastv1.SwapOutcomeDone, "remove", "the voters that stay healthy, then the member removed"},
	{holdfastv1.StepFinishDemote, holdfastv1.SwapReasonAgentRequested, "tombstone", "the node plugin recording the removal (its tombstone on the Node), then role-step finish-demote set"},
	{holdfastv1.StepFinishDemote, holdfastv1.SwapReasonLabelsCleared, "labels", "the role labels and etcd annotations cleared"},
	{holdfastv1.StepFinishDemote, holdfastv1.SwapOutcomeDone, "agent-ready", "the node plugin's finish-demote done, a Ready heartbeat after it (the kubelet's status report), the tombstone retired on the Node, the uncordon"},
	{holdfastv1.StepRelease, string(holdfastv1.SwapSucceeded), "release", "the role steps cleared, the swap finished"},
}

// phaseName is a history record's phase name and wait, matched by its
// outcome first and then by its reason; ok false for a record a swap that
// succeeds does not write on its way.
func phaseName(first bool, h holdfastv1.SwapStepRecord) (name, what string, ok bool) {
	for _, key := range []string{h.Outcome, h.Reason} {
		for _, p := range swapPhaseNames {
			if p.step == h.Step && key != "" && ((first && p.key == "first") || (!first && p.key == key)) {
				return p.name, p.what, true
			}
		}
	}
	return "", "", false
}

// SwapPhasesOf reads the phases of the finished swap s from its history and
// the node plugins' reports on nodes (by name; a missing one is left out).
func SwapPhasesOf(s *holdfastv1.VoterSwap, nodes map[string]*corev1.Node) (SwapPhases, error) {
	p := SwapPhases{Swap: s.Name}
	if s.Status.FinishedAt == nil || len(s.Status.History) == 0 {
		return p, fmt.Errorf("swap %s has not finished (phase %q, %d history records)", s.Name, s.Status.Phase, len(s.Status.History))
	}
	created := s.CreationTimestamp.Time
	p.Total = s.Status.FinishedAt.Sub(created)
	var rows []SwapPhase
	for i, h := range s.Status.History {
		record := fmt.Sprintf("%s %s %s: %s", h.Step, h.Outcome, h.Reason, h.Message)
		// A retried action is part of the wait for the one that follows.
		if h.Outcome == holdfastv1.SwapOutcomeRetried {
			rows = append(rows, SwapPhase{At: h.At.Time, Record: record})
			continue
		}
		name, what, ok := phaseName(i == 0, h)
		if !ok {
			name, what = string(h.Step)+"/"+h.Outcome, "(not a step of a swap that succeeds)"
		}
		rows = append(rows, SwapPhase{Name: name, At: h.At.Time, What: what, Record: record})
	}
	mark := func(node string, at time.Time, what string) {
		rows = append(rows, SwapPhase{At: at, Record: "holdfast-node on " + node + ": " + what})
	}
	if n := nodes[s.Status.Incoming]; n != nil {
		if r := holdfastv1.ActuatorReportOf(n.Annotations); r != nil && r.Swap == s.Status.SwapID && r.Step == holdfastv1.RoleStepPromote {
			if r.StartedAt != nil {
				mark(n.Name, r.StartedAt.Time, "server unit started (promote)")
			}
			mark(n.Name, r.At.Time, "promote "+r.Phase)
		}
	}
	if n := nodes[s.Spec.Outgoing]; n != nil {
		if r := holdfastv1.ActuatorReportOf(n.Annotations); r != nil && r.Swap == s.Status.SwapID {
			mark(n.Name, r.At.Time, r.Step+" "+r.Phase)
		}
	}
	// History first among equal seconds: a node's report of a second is
	// read by the pass that acted in it or later.
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].At.Before(rows[j].At) })
	// A phase spans from the history record before it; a mark (a node's
	// report, a retry) from the row before it.
	prevRecord, prev := created, created
	for i := range rows {
		if rows[i].Name == "" {
			rows[i].D = rows[i].At.Sub(prev)
		} else {
			rows[i].D = rows[i].At.Sub(prevRecord)
			prevRecord = rows[i].At
		}
		prev = rows[i].At
	}
	p.Phases = rows
	return p, nil
}

// SwapPhases reads the phases of the finished swap named name.
func (w *World) SwapPhases(ctx context.Context, name string) (SwapPhases, error) {
	s := &holdfastv1.VoterSwap{}
	if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return SwapPhases{Swap: name}, err
	}
	nodes := map[string]*corev1.Node{}
	for _, n := range []string{s.Spec.Outgoing, s.Status.Incoming} {
		node := &corev1.Node{}
		if err := w.Client.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
			return SwapPhases{Swap: name}, err
		}
		nodes[n] = node
	}
	return SwapPhasesOf(s, nodes)
}

// ByName sums the spans of each named phase (a phase a swap passes twice,
// a retried action's, counts once with both spans).
func (p SwapPhases) ByName() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, r := range p.Phases {
		if r.Name != "" {
			out[r.Name] += r.D
		}
	}
	return out
}

// SwapPhaseNames are the phase names in the order of swapPhaseNames.
func SwapPhaseNames() []string {
	var out []string
	for _, p := range swapPhaseNames {
		out = append(out, p.name)
	}
	return out
}

// String is the report: one line per span, the node plugin's reports
// between them.
func (p SwapPhases) String() string {
	var b strings.Builder
	for _, r := range p.Phases {
		if r.Name == "" {
			fmt.Fprintf(&b, "  %s  %7s  %-14s %s\n", r.At.UTC().Format("15:04:05"), "", "", r.Record)
			continue
		}
		fmt.Fprintf(&b, "  %s  %6.0fs  %-14s waited for %s\n  %8s  %7s  %-14s %s\n", r.At.UTC().Format("15:04:05"), r.D.Seconds(), r.Name, r.What,
			"", "", "", r.Record)
	}
	fmt.Fprintf(&b, "  total %.0fs, the swap's creation -> finished", p.Total.Seconds())
	return b.String()
}

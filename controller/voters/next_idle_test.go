package voters

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func TestNextIdleAndDecisions(t *testing.T) {
	unfit := func(o *Observation) {
		fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Minute))
		o.UnfitSince["n2"] = t0.Add(-11 * time.Minute)
	}
	runNext(t, []nextCase{
		{"an even count left behind is finished before any new decision", func(o *Observation) {
			s := running(o, holdfastv1.StepRemoveMember)
			s.Status.OutgoingMemberID = HexID(memberID("n1"))
			withVoter(o)
			setLeader(o, "n2")
			o.Swaps = append(o.Swaps, swap("s2", "n2", "n5", holdfastv1.SwapManual))
			unfit(o)
		}, want{kind: RemoveMember, node: "n1"}},
		{"an even count without a swap: no automatic decision", func(o *Observation) {
			withVoter(o)
			unfit(o)
		}, want{waitFor: holdfastv1.SwapReasonVoterCountOffTarget, says: []string{"4 voters where the target is 3"}}},
		{"a voter unfit for the window is proposed under dry run", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			unfit(o)
		}, want{kind: Propose, says: []string{"n2 unfit", "fsync p99 40ms over 10ms"}}},
		{"a voter unfit for the window is swapped out", unfit, want{kind: CreateSwap, check: func(t *testing.T, d Decision) {
			if d.Action.Outgoing != "n2" {
				t.Errorf("swaps out %s", d.Action.Outgoing)
			}
		}}},
		{"unfit for less than the window: nothing yet", func(o *Observation) {
			unfit(o)
			o.UnfitSince["n2"] = t0.Add(-time.Minute)
		}, want{}},
		{"a stale report is never unfit", func(o *Observation) {
			unfit(o)
			fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Hour))
		}, want{}},
		{"an unfit pinned voter is left alone", func(o *Observation) {
			unfit(o)
			o.Nodes["n2"].Labels[holdfastv1.LabelPinned] = "true"
		}, want{}},
		{"the cooldown holds automatic swaps back", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapRolledBack, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
		}, want{waitFor: holdfastv1.SwapReasonCooldown}},
		{"an abandoned swap starts no cooldown", func(o *Observation) {
			unfit(o)
			s := swap("s0", "n2", "", holdfastv1.SwapAutomatic)
			s.Status.Phase, s.Status.FinishedAt = holdfastv1.SwapAbandoned, &metav1.Time{Time: t0.Add(-time.Minute)}
			o.Swaps = append(o.Swaps, s)
		}, want{kind: CreateSwap}},
		{"a refused automatic swap starts the cooldown (no retry every pass)", func(o *Observation) {
			unfit(o)
			s := swap("s0", "n2", "", holdfastv1.SwapAutomatic)
			s.Status.Phase, s.Status.FinishedAt = holdfastv1.SwapRefused, &metav1.Time{Time: t0.Add(-time.Minute)}
			o.Swaps = append(o.Swaps, s)
		}, want{waitFor: holdfastv1.SwapReasonCooldown}},
		{"a proposal that no longer stands is withdrawn", func(o *Observation) {
			o.Policy.Status.ProposedSwap = &holdfastv1.ProposedSwap{Outgoing: "n2", At: metav1.NewTime(t0.Add(-time.Hour))}
		}, want{kind: Withdraw}},
		{"a node a finished swap cordoned is uncordoned once Ready", func(o *Observation) {
			cordon(o.Nodes["n5"], "old-swap")
		}, want{kind: Uncordon, node: "n5"}},
		{"a role step carried out after its swap finished is cleared", func(o *Observation) {
			setStep(o.Nodes["n5"], holdfastv1.RoleAgent, "old-swap", holdfastv1.RoleStepFinishDemote)
			setReport(o.Nodes["n5"], "old-swap", holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone, nil, t0)
		}, want{kind: ClearRoleStep, node: "n5"}},
	})
}

// TestAutomaticConditionSaysWhyNoSwapIsMade: VoterPolicy's AutomaticSwap
// condition for each automatic decision, and no change on a pass that makes
// none.
func TestAutomaticConditionSaysWhyNoSwapIsMade(t *testing.T) {
	unfit := func(o *Observation) {
		fitness(o.Nodes["n2"], 40_000, t0.Add(-time.Minute))
		o.UnfitSince["n2"] = t0.Add(-11 * time.Minute)
	}
	cases := []struct {
		name   string
		mutate func(*Observation)
		status metav1.ConditionStatus
		reason string
		says   string
		none   bool
	}{
		{"a voter unfit for the window is swapped out", unfit, metav1.ConditionTrue, holdfastv1.SwapReasonVoterUnfit, "n2 unfit for the window 10m0s", false},
		{"the cooldown holds an unfit voter back", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
		}, metav1.ConditionFalse, holdfastv1.SwapReasonCooldown, "n2 is unfit (fsync p99 40ms over 10ms) but the cooldown runs until 2026-03-01T12:50:00Z", false},
		{"the cooldown, a stale proposal withdrawn: the reason stays", func(o *Observation) {
			unfit(o)
			o.Policy.Status.LastSwap = &holdfastv1.SwapOutcome{Name: "s0", Phase: holdfastv1.SwapSucceeded, FinishedAt: &metav1.Time{Time: t0.Add(-10 * time.Minute)}}
			o.Policy.Status.ProposedSwap = &holdfastv1.ProposedSwap{Outgoing: "n2", At: metav1.NewTime(t0.Add(-time.Hour))}
		}, metav1.ConditionFalse, holdfastv1.SwapReasonCooldown, "but the cooldown runs until", false},
		{"dry run proposes", func(o *Observation) {
			o.Policy.Spec.DryRun = new(true)
			unfit(o)
		}, metav1.ConditionFalse, holdfastv1.SwapReasonDryRun, "proposed (dry run): n2 unfit", false},
		{"a swap in progress", func(o *Observation) {
			running(o, holdfastv1.StepPromote)
			unfit(o)
		}, metav1.ConditionFalse, holdfastv1.SwapReasonSwapInProgress, "VoterSwap s1 is in progress", false},
		{"every voter fit", nil, metav1.ConditionFalse, holdfastv1.SwapReasonNoUnfitVoter, "no voter has been unfit for a whole fitness window (10m0s)", false},
		{"a pass tidying a leftover decides nothing", func(o *Observation) {
			cordon(o.Nodes["n5"], "old-swap")
		}, "", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := fixture()
			if tc.mutate != nil {
				tc.mutate(o)
			}
			c, ok := AutomaticCondition(o, Next(o))
			if tc.none {
				if ok {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if !ok || c.Type != holdfastv1.ConditionAutomaticSwap || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("condition %+v (ok %v), want %s %s saying %q", c, ok, tc.status, tc.reason, tc.says)
			}
		})
	}
}

//go:build integration

package voters_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestTheEvenCountIsReportedAndAlerts: a swap held between its promotion and
// the outgoing member's removal (the incoming Node never Ready) leaves etcd
// with four voters, real ones. VoterPolicy status says so: evenSince is set
// once and kept while the count stays even, the VotersEven condition is True
// with reason Even, and holdfast_voters_even is 1, so the chart's
// HoldfastEvenVoterCount alert (max(holdfast_voters_even) == 1) fires. Once
// the swap removes the outgoing member, all three are cleared.
func TestTheEvenCountIsReportedAndAlerts(t *testing.T) {
	expr := alertExpr(t, "HoldfastEvenVoterCount")
	if expr != "max(holdfast_voters_even) == 1" {
		t.Fatalf("the chart's HoldfastEvenVoterCount alert reads %q; this test judges max(holdfast_voters_even) == 1", expr)
	}
	c := newCluster(t, []string{"v1", "v2", "v3"}, []string{"v4"})
	c.policy(t, nil)
	startController(t, ctrlOpts{})
	waitHealthyStatus(t, "v1", "v2", "v3")
	if got := gauge(t, "holdfast_voters_even"); got != 0 {
		t.Fatalf("holdfast_voters_even is %v with three voters, want 0", got)
	}

	h4 := c.hosts["v4"]
	h4.quiet.Store(true)
	name := createSwap(t, "v1", "v4")
	waitWaiting(t, name, holdfastv1.SwapReasonWaitingForNodeReady, 90*time.Second)
	if v, _, _ := etcdMembers(t, c.client("v2", "v3")); len(v) != 4 {
		t.Fatalf("the swap waits for v4's Ready with voters %v, want four", v)
	}
	var since *metav1.Time
	poll.Until(t, 30*time.Second, "VoterPolicy status reporting four voters as even", func() (bool, string) {
		p := getPolicy(t)
		cond := condition(p, holdfastv1.ConditionVotersEven)
		since = p.Status.EvenSince
		return len(p.Status.Voters) == 4 && since != nil && cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == holdfastv1.SwapReasonEven &&
				strings.Contains(cond.Message, "4 voters since "+since.UTC().Format(time.RFC3339)),
			fmt.Sprintf("voters %v evenSince %v condition %+v", p.Status.Voters, p.Status.EvenSince, cond)
	})
	if got := gauge(t, "holdfast_voters_even"); got != 1 {
		t.Fatalf("holdfast_voters_even is %v with four voters: the alert %s would not fire", got, expr)
	}
	// Kept, not restamped, by the passes that follow: the status's
	// heartbeat moves on, evenSince does not.
	shifted.Advance(10 * time.Second)
	poll.Until(t, 30*time.Second, "a later status write", func() (bool, string) {
		p := getPolicy(t)
		return p.Status.ObservedTime != nil && !p.Status.ObservedTime.Time.Before(since.Add(10*time.Second)),
			fmt.Sprintf("observed %v", p.Status.ObservedTime)
	})
	if p := getPolicy(t); p.Status.EvenSince == nil || !p.Status.EvenSince.Equal(since) {
		t.Fatalf("evenSince %v after a later pass, want kept at %v", p.Status.EvenSince, since)
	}

	h4.quiet.Store(false)
	waitPhase(t, name, holdfastv1.SwapSucceeded, 2*time.Minute)
	poll.Until(t, 30*time.Second, "the even count cleared", func() (bool, string) {
		p := getPolicy(t)
		cond := condition(p, holdfastv1.ConditionVotersEven)
		return len(p.Status.Voters) == 3 && p.Status.EvenSince == nil && cond != nil && cond.Status == metav1.ConditionFalse && gauge(t, "holdfast_voters_even") == 0,
			fmt.Sprintf("voters %v evenSince %v condition %+v", p.Status.Voters, p.Status.EvenSince, cond)
	})
}

func getPolicy(t testing.TB) *holdfastv1.VoterPolicy {
	t.Helper()
	p := &holdfastv1.VoterPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func condition(p *holdfastv1.VoterPolicy, typ string) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// gauge is a gauge's value as the controller's metrics endpoint serves it.
func gauge(t testing.TB, name string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s in the controller's registry", name)
	return 0
}

// alertExpr is the expression of a chart alert, as the chart's template
// holds it.
func alertExpr(t testing.TB, alert string) string {
	t.Helper()
	f, err := os.Open("../../charts/holdfast/templates/monitoring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "- alert: "+alert {
			found = true
		} else if found && strings.HasPrefix(line, "expr: ") {
			return strings.TrimPrefix(line, "expr: ")
		}
	}
	t.Fatalf("no alert %s in the chart", alert)
	return ""
}

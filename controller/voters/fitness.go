package voters

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Verdict is what one fitness report says of a voter.
type Verdict int

const (
	// FitnessUnknown: no report, an unreadable one, or one older than the
	// window. Unknown is never unfit: a swap is never decided on silence.
	FitnessUnknown Verdict = iota
	Fit
	Unfit
)

// JudgeFitness reads a node's AnnotationFitness against the policy's
// thresholds: unfit when the fsync p99 or the slowest answering peer's round
// trip is over its threshold. A peer that did not answer (-1) is not counted
// against this node: it says more about the peer, whose own health the gates
// judge. The score orders unfit voters (the worst first).
func JudgeFitness(n *corev1.Node, t policyTimes, now time.Time) (Verdict, float64, string) {
	v, ok := n.Annotations[holdfastv1.AnnotationFitness]
	if !ok {
		return FitnessUnknown, 0, "no fitness report"
	}
	f := &holdfastv1.Fitness{}
	var err error
	if f, err = parseFitness(v); err != nil {
		return FitnessUnknown, 0, err.Error()
	}
	if now.Sub(f.At.Time) > t.window {
		return FitnessUnknown, 0, fmt.Sprintf("fitness report from %s is older than the window %v", f.At.UTC().Format(time.RFC3339), t.window)
	}
	var rtt int64
	for _, r := range f.PeerRTTMicros {
		rtt = max(rtt, r)
	}
	fs := float64(f.FsyncP99Micros) / float64(t.maxFsyncMicros)
	rs := float64(rtt) / float64(t.maxRTTMicros)
	score := max(fs, rs)
	switch {
	case f.FsyncP99Micros > t.maxFsyncMicros && rtt > t.maxRTTMicros:
		return Unfit, score, fmt.Sprintf("fsync p99 %s over %s and peer round trip %s over %s", micros(f.FsyncP99Micros), micros(t.maxFsyncMicros), micros(rtt), micros(t.maxRTTMicros))
	case f.FsyncP99Micros > t.maxFsyncMicros:
		return Unfit, score, fmt.Sprintf("fsync p99 %s over %s", micros(f.FsyncP99Micros), micros(t.maxFsyncMicros))
	case rtt > t.maxRTTMicros:
		return Unfit, score, fmt.Sprintf("peer round trip %s over %s", micros(rtt), micros(t.maxRTTMicros))
	}
	return Fit, score, ""
}

func parseFitness(v string) (*holdfastv1.Fitness, error) {
	f := &holdfastv1.Fitness{}
	if err := jsonUnmarshal(v, f); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", holdfastv1.AnnotationFitness, err)
	}
	return f, nil
}

func micros(us int64) string { return (time.Duration(us) * time.Microsecond).String() }

// UpdateUnfitSince tracks, for each voter, since when every report seen has
// been unfit: a fit or unknown report clears it. A voter is unfit for the
// swap decision once it has been so for a whole window (Next). The tracker
// lives in the process: after a restart the window starts over, which only
// delays a decision.
func UpdateUnfitSince(since map[string]time.Time, voters []string, nodes map[string]*corev1.Node, p *holdfastv1.VoterPolicy, now time.Time) {
	t := timesOf(p)
	keep := map[string]bool{}
	for _, v := range voters {
		n := nodes[v]
		if n == nil {
			continue
		}
		if verdict, _, _ := JudgeFitness(n, t, now); verdict == Unfit {
			keep[v] = true
			if _, ok := since[v]; !ok {
				since[v] = now
			}
		}
	}
	for v := range since {
		if !keep[v] {
			delete(since, v)
		}
	}
}

//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
)

// fill writes about mb megabytes into etcd: 10 KiB values, 8 writers.
func fill(b testing.TB, cli *clientv3.Client, mb int) {
	b.Helper()
	value := strings.Repeat("x", 10<<10)
	n := mb * 100 // 10 KiB values: 100 per MB
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		go func(w int) {
			for i := w; i < n; i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("/holdfast-fill/%06d", i), value)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(w)
	}
	for w := 0; w < 8; w++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVoterSwap100MB is one full swap (a standby in, a voter out) on a
// three-member cluster holding about 100 MB, with the writer putting a key
// every 50ms and reading it back: the time of each step (as polled every
// 50ms), the whole swap and the longest write stall, with the controller's
// passes at their shipped intervals. The goal (stall <=
// 200ms) is for an outgoing voter that does not lead (follower); leader is
// the same swap with the outgoing voter leading. Each write over 100ms is
// logged with the swap action before it and any leader change near it.
// Run with
//
//	go test -tags integration -run '^$' -bench 'BenchmarkVoterSwap100MB/follower' -benchtime 1x ./controller/voters/
func BenchmarkVoterSwap100MB(b *testing.B) {
	for _, lead := range []bool{false, true} {
		name := "follower"
		if lead {
			name = "leader"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchSwap(b, fmt.Sprintf("%s%d", name[:1], i), lead)
			}
		})
	}
}

// moment is something seen at a time during a benchmarked swap.
type moment struct {
	at   time.Time
	what string
}

func benchSwap(b *testing.B, prefix string, lead bool) {
	names := []string{prefix + "b1", prefix + "b2", prefix + "b3", prefix + "b4"}
	c := newCluster(b, names[:3], names[3:])
	c.policy(b, nil)
	startController(b, ctrlOpts{shipped: true})
	waitHealthyStatus(b, names[:3]...)
	all := c.client(names[:3]...)
	fill(b, all, 100)
	// The outgoing voter: one that leads, or one that does not.
	out := ""
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	for _, n := range names[:3] {
		st, err := all.Status(ctx, c.hosts[n].member.ClientURL)
		if err == nil && (st.Leader == st.Header.MemberId) == lead && out == "" {
			out = n
		}
	}
	cancel()
	if out == "" {
		b.Fatal("no outgoing voter found")
	}
	var stay []string
	for _, n := range names[:3] {
		if n != out {
			stay = append(stay, n)
		}
	}
	w := startWriter(c.client(stay...))
	// The machine's own noise: the writer alone for 15s before the swap.
	idleFrom := time.Now()
	time.Sleep(15 * time.Second) // the baseline window the swap's latencies are compared with
	ids := map[uint64]string{}
	if ml, err := all.MemberList(context.Background()); err == nil {
		for _, m := range ml.Members {
			ids[m.ID] = m.Name
		}
	}
	leaders := watchLeader(c, append(slices.Clone(stay), names[3]), ids)
	b.ResetTimer()
	start := time.Now()
	name := createSwap(b, out, names[3])
	steps := map[holdfastv1.SwapStep]time.Duration{}
	var order []holdfastv1.SwapStep
	var cur holdfastv1.SwapStep
	curAt := start
	// Each history entry the first time it is seen (within 50ms of it).
	var actions []moment
	seen := 0
	for {
		s := getSwap(b, name)
		now := time.Now()
		for _, h := range s.Status.History[min(seen, len(s.Status.History)):] {
			actions = append(actions, moment{now, fmt.Sprintf("%s %s %s", h.Step, h.Outcome, h.Reason)})
		}
		seen = len(s.Status.History)
		if s.Status.Step != cur || s.Status.Phase.Finished() {
			if cur != "" {
				steps[cur] += now.Sub(curAt)
			}
			cur, curAt = s.Status.Step, now
			if cur != "" && !slices.Contains(order, cur) {
				order = append(order, cur)
			}
		}
		if s.Status.Phase.Finished() {
			if s.Status.Phase != holdfastv1.SwapSucceeded {
				b.Fatalf("swap %s: %s\n%s", s.Status.Phase, describe(s), history(s))
			}
			break
		}
		if now.Sub(start) > 5*time.Minute {
			b.Fatalf("swap not finished in 5m: %s", describe(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
	total := time.Since(start)
	b.StopTimer()
	changes := leaders()
	r := checkWriter(b, w)
	// The longest write that started during the swap, and the longest in
	// the 15s before it (stalls under 100ms are not kept: 100 stands for
	// "at most 100").
	stall, idle := etcdwatch.StallOver, etcdwatch.StallOver
	idleOver, swapOver := 0, 0
	for _, s := range r.Stalls {
		switch {
		case s.At.Before(idleFrom):
		case s.At.Before(start):
			idle, idleOver = max(idle, s.Took), idleOver+1
		default:
			stall, swapOver = max(stall, s.Took), swapOver+1
		}
	}
	b.ReportMetric(total.Seconds(), "swap-s")
	b.ReportMetric(float64(stall.Milliseconds()), "stall-ms")
	b.ReportMetric(float64(idle.Milliseconds()), "idle-stall-ms")
	b.ReportMetric(float64(swapOver)/total.Seconds(), "stalls/s")
	b.ReportMetric(float64(idleOver)/start.Sub(idleFrom).Seconds(), "idle-stalls/s")
	for _, st := range order {
		b.ReportMetric(steps[st].Seconds(), strings.ToLower(string(st))+"-s")
	}
	role := "not the leader"
	if lead {
		role = "the leader"
	}
	b.Logf("outgoing %s (%s); steps %v; total %v; longest write stall during the swap %v (%d writes over %v), in the 15s before it %v (%d over)",
		out, role, order, total.Round(time.Millisecond), stall.Round(time.Millisecond), swapOver, etcdwatch.StallOver, idle.Round(time.Millisecond), idleOver)
	var lines []string
	for _, ch := range changes {
		lines = append(lines, fmt.Sprintf("  %+.3fs %s", ch.at.Sub(start).Seconds(), ch.what))
	}
	b.Logf("leader and term as the members that stay report them:\n%s", strings.Join(lines, "\n"))
	lines = nil
	for _, a := range actions {
		lines = append(lines, fmt.Sprintf("  %+.3fs %s", a.at.Sub(start).Seconds(), a.what))
	}
	b.Logf("swap actions (first seen):\n%s", strings.Join(lines, "\n"))
	lines = nil
	for _, s := range r.Stalls {
		before := "before the swap"
		for _, a := range actions {
			if !a.at.After(s.At) {
				before = a.what
			}
		}
		lines = append(lines, fmt.Sprintf("  %+.3fs %v after %q", s.At.Sub(start).Seconds(), s.Took.Round(time.Millisecond), before))
	}
	b.Logf("writes over %v:\n%s", etcdwatch.StallOver, strings.Join(lines, "\n"))
}

// watchLeader polls the members' Status every 50ms and records each change
// of the leader or the raft term; the function it returns stops it and
// returns the changes.
func watchLeader(c *cluster, names []string, ids map[uint64]string) func() []moment {
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var changes []moment
	clis := map[string]*clientv3.Client{}
	for _, n := range names {
		clis[n] = c.client(n)
	}
	go func() {
		defer close(done)
		last := ""
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, n := range names {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				st, err := clis[n].Status(ctx, c.hosts[n].member.ClientURL)
				cancel()
				if err != nil {
					continue
				}
				ids[st.Header.MemberId] = n
				leader := ids[st.Leader]
				if leader == "" {
					leader = fmt.Sprintf("%x", st.Leader)
				}
				now := fmt.Sprintf("leader %s term %d", leader, st.RaftTerm)
				if now != last {
					mu.Lock()
					changes = append(changes, moment{time.Now(), now + " (asked " + n + ")"})
					mu.Unlock()
					last = now
				}
				break
			}
		}
	}()
	return func() []moment {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return changes
	}
}

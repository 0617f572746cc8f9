//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
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

// BenchmarkVoterSwap100MB is one full swap (a standby in, a voter that does
// not lead out) on a three-member cluster holding about 100 MB, with the
// writer putting a key every 50ms: the time of each step (as polled every
// 50ms), the whole swap and the longest write stall. Run with
//
//	go test -tags integration -run '^$' -bench BenchmarkVoterSwap100MB -benchtime 1x ./controller/voters/
func BenchmarkVoterSwap100MB(b *testing.B) {
	for i := 0; i < b.N; i++ {
		names := []string{fmt.Sprintf("b%d1", i), fmt.Sprintf("b%d2", i), fmt.Sprintf("b%d3", i), fmt.Sprintf("b%d4", i)}
		c := newCluster(b, names[:3], names[3:])
		c.policy(b, nil)
		startController(b, ctrlOpts{})
		waitHealthyStatus(b, names[:3]...)
		all := c.client(names[:3]...)
		fill(b, all, 100)
		// The outgoing voter is one that does not lead.
		out := ""
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, n := range names[:3] {
			st, err := all.Status(ctx, c.hosts[n].member.ClientURL)
			if err == nil && st.Leader != st.Header.MemberId && out == "" {
				out = n
			}
		}
		cancel()
		var stay []string
		for _, n := range names[:3] {
			if n != out {
				stay = append(stay, n)
			}
		}
		w := startWriter(c.client(stay...))
		b.ResetTimer()
		start := time.Now()
		name := createSwap(b, out, names[3])
		steps := map[holdfastv1.SwapStep]time.Duration{}
		var order []holdfastv1.SwapStep
		var cur holdfastv1.SwapStep
		curAt := start
		for {
			s := getSwap(b, name)
			now := time.Now()
			if s.Status.Step != cur || s.Status.Phase.Finished() {
				if cur != "" {
					steps[cur] += now.Sub(curAt)
				}
				cur, curAt = s.Status.Step, now
				if cur != "" && !containsStep(order, cur) {
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
		stall := w.check(b)
		b.ReportMetric(total.Seconds(), "swap-s")
		b.ReportMetric(float64(stall.Milliseconds()), "stall-ms")
		for _, st := range order {
			b.ReportMetric(steps[st].Seconds(), strings.ToLower(string(st))+"-s")
		}
		b.Logf("outgoing %s (not the leader); steps %v; total %v; longest write stall %v", out, order, total.Round(time.Millisecond), stall)
	}
}

func containsStep(s []holdfastv1.SwapStep, x holdfastv1.SwapStep) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

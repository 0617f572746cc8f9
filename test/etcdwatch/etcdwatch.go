// Package etcdwatch watches an etcd cluster from the outside while voter
// swaps run on it: etcd's own member list, a writer whose every
// acknowledged write must still be there, and a quorum sampler. The voter
// controller's real-etcd tests and the e2e voter drills share it.
package etcdwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Members is etcd's own view: voters and learners by name, and the
// cluster ID.
func Members(ctx context.Context, cli *clientv3.Client) (voters, learners []string, clusterID uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			learners = append(learners, m.Name)
		} else {
			voters = append(voters, m.Name)
		}
	}
	slices.Sort(voters)
	return voters, learners, ml.Header.ClusterId, nil
}

// Writer is the client the voter drills watch: it puts a key every
// 50 ms and reads it back, retrying a write until it is acknowledged; it
// records every failed attempt, the writes never acknowledged within 10 s,
// the longest a write took to be acknowledged and read back (the stall),
// and its whole history of puts and gets, which Stop checks for
// linearizability (Linearizable).
type Writer struct {
	cli     *clientv3.Client
	prefix  string
	attempt time.Duration
	stop    chan struct{}
	done    chan struct{}

	mu        sync.Mutex
	acked     []string
	failed    []string
	attempts  []string
	longest   time.Duration
	longestAt time.Time
	stalls    []Stall
	started   time.Time
	history   History
}

// Stall is one write (put and read back) that took over StallOver, from At.
type Stall struct {
	At   time.Time
	Took time.Duration
}

// StallOver is the least a write takes to count as a stall (a benchmark
// places the stalls in the swap's steps).
const StallOver = 100 * time.Millisecond

// StartWriter starts writing under prefix; each attempt (put and read
// back) may take attempt before it is tried again (0: 2 s).
func StartWriter(cli *clientv3.Client, prefix string, attempt time.Duration) *Writer {
	if attempt == 0 {
		attempt = 2 * time.Second
	}
	w := &Writer{cli: cli, prefix: prefix, attempt: attempt, stop: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	go w.run()
	return w
}

func (w *Writer) run() {
	defer close(w.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		k, v := fmt.Sprintf("%s%07d", w.prefix, i), fmt.Sprintf("v%d", i)
		start := time.Now()
		ok := false
		for time.Since(start) < 10*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), w.attempt)
			call := time.Since(w.started)
			_, err := w.cli.Put(ctx, k, v)
			w.record(Op{Put: true, Key: k, Value: v, Unknown: err != nil, Call: call, Return: time.Since(w.started)})
			if err == nil {
				var resp *clientv3.GetResponse
				call = time.Since(w.started)
				resp, err = w.cli.Get(ctx, k)
				if err == nil {
					got := Op{Key: k, Call: call, Return: time.Since(w.started)}
					if len(resp.Kvs) > 0 {
						got.Found, got.Value = true, string(resp.Kvs[0].Value)
					}
					w.record(got)
				}
				if err == nil && (len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v) {
					err = fmt.Errorf("read back %v", resp.Kvs)
				}
			}
			cancel()
			if err == nil {
				ok = true
				break
			}
			w.mu.Lock()
			w.attempts = append(w.attempts, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format("15:04:05.000"), k, err))
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		w.mu.Lock()
		if ok {
			w.acked = append(w.acked, k)
		} else {
			w.failed = append(w.failed, k)
		}
		if took > w.longest {
			w.longest, w.longestAt = took, start
		}
		if took > StallOver {
			w.stalls = append(w.stalls, Stall{At: start, Took: took})
		}
		w.mu.Unlock()
	}
}

func (w *Writer) record(o Op) {
	w.mu.Lock()
	w.history = append(w.history, o)
	w.mu.Unlock()
}

// Report is what the writer saw.
type Report struct {
	Acked int
	// Failed are writes never acknowledged within 10 s; Lost are
	// acknowledged writes etcd no longer holds.
	Failed, Lost []string
	// FailedAttempts are every attempt that erred (retried), with time.
	FailedAttempts []string
	Longest        time.Duration
	LongestAt      time.Time
	// Stalls are the writes that took over StallOver.
	Stalls []Stall
	// History is every put and get, the final read of every key included;
	// NotLinearizable says why it is not linearizable, nil when it is.
	History         History
	NotLinearizable error
}

func (r Report) String() string {
	lin := "linearizable"
	if r.NotLinearizable != nil {
		lin = "NOT linearizable"
	}
	return fmt.Sprintf("%d writes acknowledged, %d failed, %d lost, %d failed attempts (retried); longest stall %v at %s; history of %d operations %s",
		r.Acked, len(r.Failed), len(r.Lost), len(r.FailedAttempts), r.Longest.Round(time.Millisecond), r.LongestAt.UTC().Format("15:04:05.000"),
		len(r.History), lin)
}

// Stop stops the writer, reads every key back, and checks the history
// with that final read for linearizability.
func (w *Writer) Stop(ctx context.Context) (Report, error) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	r := Report{Acked: len(w.acked), Failed: slices.Clone(w.failed), FailedAttempts: slices.Clone(w.attempts),
		Longest: w.longest, LongestAt: w.longestAt, Stalls: slices.Clone(w.stalls), History: slices.Clone(w.history)}
	acked := slices.Clone(w.acked)
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	call := time.Since(w.started)
	resp, err := w.cli.Get(ctx, w.prefix, clientv3.WithPrefix())
	if err != nil {
		return r, err
	}
	ret := time.Since(w.started)
	have := map[string]string{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	for _, k := range acked {
		if _, ok := have[k]; !ok {
			r.Lost = append(r.Lost, k)
		}
	}
	// The final read is one get of every key the writer ever put, all at
	// the same instant.
	read := map[string]bool{}
	for _, o := range slices.Clone(r.History) {
		if o.Put && !read[o.Key] {
			read[o.Key] = true
			v, ok := have[o.Key]
			r.History = append(r.History, Op{Key: o.Key, Value: v, Found: ok, Call: call, Return: ret})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if !read[k] {
			r.History = append(r.History, Op{Key: k, Value: have[k], Found: true, Call: call, Return: ret})
		}
	}
	r.NotLinearizable = Linearizable(r.History)
	return r, nil
}

// Quorum samples the cluster every interval: a sample holds when some
// voter answers Status naming a leader that is a voter (by etcd's own member
// list). Every sample that does not is recorded.
type Quorum struct {
	cli  *clientv3.Client
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples int
	bad     []string
	// last is the membership of the last member list read, used when the
	// client's pinned endpoint is a paused member: its TCP connection stays
	// up, so the balancer does not move off it and MemberList times out
	// although the other voters have quorum.
	last []*etcdserverpb.Member
}

// StartQuorum starts sampling.
func StartQuorum(cli *clientv3.Client, every time.Duration) *Quorum {
	q := &Quorum{cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-q.stop:
				return
			case <-tick.C:
			}
			why := q.sample()
			q.mu.Lock()
			q.samples++
			if why != "" {
				q.bad = append(q.bad, time.Now().UTC().Format("15:04:05.000")+" "+why)
			}
			q.mu.Unlock()
		}
	}()
	return q
}

// sample returns "" when a voter names a voter leader, else why not.
func (q *Quorum) sample() string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Serializable: a member answers from its own view, so the sample
	// needs no quorum to learn the membership; the leader it names is
	// what shows quorum.
	ml, err := q.cli.MemberList(ctx, clientv3.WithSerializable())
	cancel()
	members := q.last
	switch {
	case err == nil:
		members, q.last = ml.Members, ml.Members
	case members == nil:
		return "member list: " + err.Error()
	}
	voters := map[uint64]string{}
	for _, m := range members {
		if !m.IsLearner {
			voters[m.ID] = m.Name
		}
	}
	var whys []string
	if err != nil {
		whys = append(whys, "member list (the last one read is used): "+err.Error())
	}
	for _, m := range members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			continue
		}
		// Each member its own time: one that does not answer (paused, or
		// held out of serving by a step-down) must not use up the others'.
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := q.cli.Status(sctx, m.ClientURLs[0])
		scancel()
		if err != nil {
			whys = append(whys, m.Name+": "+err.Error())
			continue
		}
		if _, ok := voters[st.Leader]; ok && st.Leader != 0 {
			return ""
		}
		whys = append(whys, fmt.Sprintf("%s: leader %x is not a voter", m.Name, st.Leader))
	}
	return "no voter names a voter leader: " + strings.Join(whys, "; ")
}

// Stop stops sampling and returns the sample count and the samples without
// a voter leader.
func (q *Quorum) Stop() (samples int, bad []string) {
	close(q.stop)
	<-q.done
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.samples, slices.Clone(q.bad)
}

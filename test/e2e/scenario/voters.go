package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// VotersOptions put the control plane's etcd on nodes (each member the
// server unit of its node's systemd, carried out by holdfast-node) and run
// holdfast-controller --role voters on it.
type VotersOptions struct {
	// Voters bootstrap the etcd cluster the apiserver uses.
	Voters []string
	// Standbys are voter-eligible nodes that can be promoted.
	Standbys []string
}

func (o *VotersOptions) etcdRole(node string) string {
	switch {
	case o == nil:
		return ""
	case slices.Contains(o.Voters, node):
		return cluster.EtcdVoter
	case slices.Contains(o.Standbys, node):
		return cluster.EtcdStandby
	}
	return ""
}

// VotersControllerPort is the voters role's health port in the hub (its
// metrics on the next).
const VotersControllerPort = 8300

// votersIdentity is the voters role's holder identity; a restart keeps it.
const votersIdentity = "holdfast-controller-voters"

// startVoters labels the nodes as an admin would, creates VoterPolicy
// default (dry run: only the swaps a drill asks for are carried out) and
// starts the voters role, then waits for it to report etcd healthy.
func (w *World) startVoters(ctx context.Context, o VotersOptions) error {
	for _, n := range o.Voters {
		if err := w.LabelNode(ctx, n, map[string]string{holdfastv1.LabelEtcdRole: "true", holdfastv1.LabelVoterEligible: "true"}); err != nil {
			return err
		}
	}
	for _, n := range o.Standbys {
		if err := w.LabelNode(ctx, n, map[string]string{holdfastv1.LabelVoterEligible: "true"}); err != nil {
			return err
		}
	}
	p := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(true), CooldownSeconds: 0,
			OperationTimeoutSeconds: 90, WorkloadDrainWaitSeconds: 60, LearnerStallSeconds: 30,
			Etcd: holdfastv1.EtcdAccess{Endpoints: w.EtcdEndpoints()},
			Host: holdfastv1.HostRoleSettings{ServerUnit: cluster.ServerUnit, AgentUnit: cluster.AgentUnit,
				MemberDataDir: "/var/lib/holdfast-db/db"}}}
	if err := w.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	w.logf("starting holdfast-controller --role voters")
	if err := w.startVotersController(ctx); err != nil {
		return err
	}
	go w.superviseVoters()
	return w.WaitVotersHealthy(ctx, 2*time.Minute, o.Voters...)
}

// superviseVoters restarts the voters role whenever it exits, as its
// Deployment would: the role exits by design when it loses its election
// (an apiserver slow past its renew deadline), and a drill SIGKILLs it.
// It ends when the cluster stops.
func (w *World) superviseVoters() {
	for {
		time.Sleep(500 * time.Millisecond)
		w.votersMu.Lock()
		v := w.VotersController
		w.votersMu.Unlock()
		if w.Stopping() {
			return
		}
		if v == nil || !v.Exited() {
			continue
		}
		w.logf("holdfast-controller --role voters exited; restarting it: %s", v.Tail(3))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := w.startVotersController(ctx); err != nil && !w.Stopping() {
			w.logf("restarting the voters role: %v", err)
		}
		cancel()
	}
}

// Voters is the running voters role process.
func (w *World) Voters() *cluster.Controller {
	w.votersMu.Lock()
	defer w.votersMu.Unlock()
	return w.VotersController
}

// KillVoters SIGKILLs the voters role and waits until its supervisor has
// started it again (a new process, same identity).
func (w *World) KillVoters(ctx context.Context) error {
	old := w.Voters()
	old.Kill()
	return cluster.Poll(ctx, 2*time.Minute, func() (bool, error) {
		v := w.Voters()
		return v != old && !v.Exited(), nil
	})
}

// startVotersController starts holdfast-controller --role voters with the
// same identity and ports every time: a restart takes its own election
// Lease back at once.
func (w *World) startVotersController(ctx context.Context) error {
	w.votersMu.Lock()
	defer w.votersMu.Unlock()
	if v := w.VotersController; v != nil && !v.Exited() {
		return fmt.Errorf("%s is running", v.Identity)
	}
	snap := filepath.Join(w.Dir, "snapshots")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		return err
	}
	ctl, err := w.StartController(ctx, "voters", votersIdentity, VotersControllerPort,
		"--etcd-peer-scheme=http", fmt.Sprintf("--etcd-peer-port=%d", cluster.EtcdPeerPort),
		"--snapshot-dir="+snap, "--voter-swap-pass-interval=1s", "--voter-swap-lease-duration=15s",
		"--voter-idle-pass-interval=2s")
	if err != nil {
		return err
	}
	w.VotersController = ctl
	return nil
}

// WaitVotersHealthy waits until VoterPolicy's status says etcd is healthy
// with exactly these voters (the webhook's swap gates read that status).
func (w *World) WaitVotersHealthy(ctx context.Context, within time.Duration, voters ...string) error {
	want := slices.Sorted(slices.Values(voters))
	var last string
	err := cluster.Poll(ctx, within, func() (bool, error) {
		p := &holdfastv1.VoterPolicy{}
		if err := w.Client.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, p); err != nil {
			last = err.Error()
			return false, nil
		}
		c := meta.FindStatusCondition(p.Status.Conditions, holdfastv1.ConditionEtcdHealthy)
		if c == nil {
			last = "no EtcdHealthy condition"
			return false, nil
		}
		last = fmt.Sprintf("%s %s: %s; voters %v", c.Status, c.Reason, c.Message, p.Status.Voters)
		return c.Status == metav1.ConditionTrue && slices.Equal(p.Status.Voters, want), nil
	})
	if err != nil {
		return fmt.Errorf("VoterPolicy not healthy with voters %v: %s: %w", want, last, err)
	}
	return nil
}

// EtcdMembers is etcd's own view: voters and learners by name, and the
// cluster ID.
func EtcdMembers(ctx context.Context, cli *clientv3.Client) (voters, learners []string, clusterID uint64, err error) {
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

// EtcdWriter is the client the voter drills watch: it puts a key every
// 50 ms and reads it back, retrying a write until it is acknowledged; it
// records every failed attempt, the writes never acknowledged within 10 s,
// and the longest a write took to be acknowledged and read back (the stall).
type EtcdWriter struct {
	cli    *clientv3.Client
	prefix string
	stop   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	acked     []string
	failed    []string
	attempts  []string
	longest   time.Duration
	longestAt time.Time
}

// StartEtcdWriter starts writing under prefix.
func StartEtcdWriter(cli *clientv3.Client, prefix string) *EtcdWriter {
	w := &EtcdWriter{cli: cli, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *EtcdWriter) run() {
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := w.cli.Put(ctx, k, v)
			if err == nil {
				var resp *clientv3.GetResponse
				resp, err = w.cli.Get(ctx, k)
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
		w.mu.Unlock()
	}
}

// WriterReport is what the writer saw.
type WriterReport struct {
	Acked int
	// Failed are writes never acknowledged within 10 s; Lost are
	// acknowledged writes etcd no longer holds.
	Failed, Lost []string
	// FailedAttempts are every attempt that erred (retried), with time.
	FailedAttempts []string
	Longest        time.Duration
	LongestAt      time.Time
}

func (r WriterReport) String() string {
	return fmt.Sprintf("%d writes acknowledged, %d failed, %d lost, %d failed attempts (retried); longest stall %v at %s",
		r.Acked, len(r.Failed), len(r.Lost), len(r.FailedAttempts), r.Longest.Round(time.Millisecond), r.LongestAt.UTC().Format("15:04:05.000"))
}

// Stop stops the writer and reads every key back.
func (w *EtcdWriter) Stop(ctx context.Context) (WriterReport, error) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	r := WriterReport{Acked: len(w.acked), Failed: slices.Clone(w.failed), FailedAttempts: slices.Clone(w.attempts),
		Longest: w.longest, LongestAt: w.longestAt}
	acked := slices.Clone(w.acked)
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return r, err
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	for _, k := range acked {
		if !have[k] {
			r.Lost = append(r.Lost, k)
		}
	}
	return r, nil
}

// QuorumWatch samples the cluster every interval: a sample holds when some
// voter answers Status naming a leader that is a voter (by etcd's own member
// list). Every sample that does not is recorded.
type QuorumWatch struct {
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

// StartQuorumWatch starts sampling.
func StartQuorumWatch(cli *clientv3.Client, every time.Duration) *QuorumWatch {
	q := &QuorumWatch{cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
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
func (q *QuorumWatch) sample() string {
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
func (q *QuorumWatch) Stop() (samples int, bad []string) {
	close(q.stop)
	<-q.done
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.samples, slices.Clone(q.bad)
}

package etcdwatch

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watched is a writer and a quorum sampler running beside a drill.
type Watched struct {
	W *Writer
	Q *Quorum
}

// Watch starts a writer under prefix and a quorum sampler every 200 ms.
func Watch(cli *clientv3.Client, prefix string) *Watched {
	return &Watched{W: StartWriter(cli, prefix, 0), Q: StartQuorum(cli, 200*time.Millisecond)}
}

// Check stops both and asserts: no write failed, no acknowledged write
// lost, the writer's history linearizable, a voter leader at every sample.
// It returns the writer's report.
func (x *Watched) Check(t testing.TB) Report {
	t.Helper()
	n, bad := x.Q.Stop()
	r, err := x.W.Stop(context.Background())
	if err != nil {
		t.Fatalf("reading the writer's keys back: %v", err)
	}
	t.Logf("writer: %s", r)
	t.Logf("quorum: %d samples, %d without a voter leader", n, len(bad))
	if len(r.Lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", r.Lost)
	}
	if len(r.Failed) > 0 {
		t.Errorf("writes never acknowledged within 10s: %v; failed attempts:\n%s", r.Failed, strings.Join(r.FailedAttempts, "\n"))
	}
	if r.NotLinearizable != nil {
		t.Errorf("the writer's history: %v", r.NotLinearizable)
	}
	if r.Acked < 20 {
		t.Errorf("only %d writes acknowledged", r.Acked)
	}
	if len(bad) > 0 {
		t.Errorf("quorum: %d of %d samples without a voter leader:\n%s", len(bad), n, strings.Join(bad, "\n"))
	}
	if n < 5 {
		t.Errorf("only %d quorum samples", n)
	}
	return r
}

// MembersOf is Members for a test: it fails t when etcd does not answer.
func MembersOf(t testing.TB, cli *clientv3.Client) (voters, learners []string, clusterID uint64) {
	t.Helper()
	v, l, id, err := Members(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	return v, l, id
}

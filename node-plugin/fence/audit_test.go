package fence_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// notifier records the Events it posts; away refuses them, as an apiserver
// out of reach does.
type notifier struct {
	away   bool
	posted []string
}

func (n *notifier) Fenced(_ context.Context, a fence.Action) error {
	if n.away {
		return errors.New("connection refused")
	}
	n.posted = append(n.posted, a.Sandbox)
	return nil
}

// A fence is audited in the agent's directory before its Event can be
// posted, and that audit is also the queue: a plugin that restarts while
// the apiserver is away still posts the Event of every fence it did, once,
// when the apiserver answers; a fence whose Event landed is not posted
// again by the next start; a line torn by a crash loses nothing after it.
func TestAFenceDoneWhileTheApiserverIsAwayIsPostedAfterARestart(t *testing.T) {
	dir := t.TempDir()
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
	u := &holdfastv1.Unit{Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 2}}}
	newAgent := func(n *notifier) *fence.Agent {
		return &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Notifier: n,
			Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: dir}
	}
	ctx := context.Background()

	// The first plugin fences while the apiserver is away, then dies.
	away := &notifier{away: true}
	first := newAgent(away)
	if acts, err := first.FenceStale(ctx, "", ""); err != nil || len(acts) != 1 {
		t.Fatalf("fencing the stale runtime: %v %+v", err, acts)
	}
	first.Flush(ctx)
	if first.Pending() != 1 {
		t.Fatalf("pending %d while the apiserver is away, want 1", first.Pending())
	}
	// Its crash tore a line it was appending.
	f, err := os.OpenFile(filepath.Join(dir, "fence-audit.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"at":"2026-`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The second starts and fences one more before it dies too.
	second := newAgent(away)
	if n, err := second.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("recovered %d actions (%v), want the one never posted", n, err)
	}
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb2")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb2", "c2")})
	if acts, err := second.FenceStale(ctx, "", ""); err != nil || len(acts) != 1 {
		t.Fatalf("fencing the second stale runtime: %v %+v", err, acts)
	}

	// The next start posts both once the apiserver answers.
	back := &notifier{}
	again := newAgent(back)
	if n, err := again.Recover(ctx); err != nil || n != 2 {
		t.Fatalf("recovered %d actions (%v), want the two never posted", n, err)
	}
	again.Flush(ctx)
	if again.Pending() != 0 || len(back.posted) != 2 || back.posted[0] != "sb1" || back.posted[1] != "sb2" {
		t.Fatalf("posted %v (pending %d), want sb1 then sb2", back.posted, again.Pending())
	}

	// The third finds nothing left to post.
	third := newAgent(&notifier{})
	if n, err := third.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("recovered %d actions (%v) whose Events were posted, want 0", n, err)
	}
}

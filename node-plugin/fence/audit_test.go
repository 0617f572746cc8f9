package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/audit"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// notifier records the Events it posts; away refuses them, as an apiserver
// out of reach does.
type notifier struct {
	away   bool
	posted []string
	acts   []fence.Action
}

func (n *notifier) Fenced(_ context.Context, a fence.Action) error {
	if n.away {
		return errors.New("connection refused")
	}
	n.posted = append(n.posted, a.Sandbox)
	n.acts = append(n.acts, a)
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

// The fence audit is in the audit trail's one schema (internal/audit): who
// (the node plugin on its node), what (the Event reason), why (the
// message), the unit, its binding epoch and the runtime stopped.
func TestAFenceAuditLineIsInTheAuditTrailsSchema(t *testing.T) {
	dir := t.TempDir()
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{runtimeSandbox("sb1")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sb1", "c1")})
	u := &holdfastv1.Unit{Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 2}}}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Notifier: &notifier{away: true},
		Clock: clocktesting.NewFakeClock(at), AuditDir: dir, Node: "edge-1"}
	if acts, err := agent.FenceStale(context.Background(), "", ""); err != nil || len(acts) != 1 {
		t.Fatalf("fencing the stale runtime: %v %+v", err, acts)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fence-audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got audit.Record
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("the audit line %q is not one record: %v", b, err)
	}
	want := audit.Record{Time: at, Component: audit.ComponentNodePlugin, Actor: "holdfast-node/edge-1",
		Reason: fence.ReasonStaleEpoch, Message: got.Message, Object: audit.Unit("plant", "u"), Epoch: 2, Node: "edge-1",
		Runtime: &audit.Runtime{Pod: "u-runtime-e1", Epoch: 1, Sandbox: "sb1", Containers: []string{"c1"}}}
	if !reflect.DeepEqual(got, want) || got.Message == "" {
		t.Errorf("audit line\n %+v\nwant\n %+v", got, want)
	}
}

// Fence audit lines already on the node in the schema before the audit
// trail had one (epoch the runtime's, bindingEpoch the unit's, no
// component) are still read by Recover after an upgrade: their Events are
// posted, with the same action as the plugin that wrote them saw.
func TestRecoverReadsFenceAuditLinesOfTheSchemaBefore(t *testing.T) {
	dir := t.TempDir()
	old := `{"at":"2026-11-20T08:00:00Z","reason":"StaleRuntimeStopped","namespace":"plant","unit":"u","pod":"u-runtime-e1",` +
		`"epoch":1,"bindingEpoch":2,"sandbox":"sb-old","containers":["c-old"],"message":"runtime of epoch 1 is behind the unit's binding at epoch 2"}` + "\n" +
		`{"at":"2026-11-20T08:01:00Z","reason":"WedgedRuntimeStopped","namespace":"plant","unit":"v","pod":"v-runtime-e4",` +
		`"epoch":4,"sandbox":"sb-posted","containers":null,"message":"wedged"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "fence-audit.jsonl"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fence-events-posted"), []byte("sb-posted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &notifier{}
	agent := &fence.Agent{CRI: critesting.NewFakeRuntimeService(), Notifier: n, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: dir}
	ctx := context.Background()
	if got, err := agent.Recover(ctx); err != nil || got != 1 {
		t.Fatalf("recovered %d actions (%v), want the one old-format line never posted", got, err)
	}
	agent.Flush(ctx)
	want := fence.Action{At: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), Reason: fence.ReasonStaleEpoch, Namespace: "plant", Unit: "u",
		Pod: "u-runtime-e1", Epoch: 1, BindingEpoch: 2, Sandbox: "sb-old", Containers: []string{"c-old"},
		Message: "runtime of epoch 1 is behind the unit's binding at epoch 2"}
	if len(n.acts) != 1 || !reflect.DeepEqual(n.acts[0], want) {
		t.Fatalf("posted %+v, want %+v", n.acts, want)
	}
}

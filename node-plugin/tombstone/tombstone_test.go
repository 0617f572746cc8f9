package tombstone_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
)

// unreachable is etcd as a host cut off from every member sees it.
type unreachable struct{}

func (unreachable) Local(context.Context) (hoststate.Member, error) {
	return hoststate.Member{}, errors.New("connection refused")
}
func (unreachable) Members(context.Context) (string, []string, error) {
	return "", nil, errors.New("no member answers")
}

// TestTheServersOwnTombstoneIsRecorded: when the server wrote its own
// tombstone (k3s does when etcd tells it its member was removed), the
// watcher records holdfast's tombstone for the recorded member without
// asking etcd, so the Node reports the removal even with every peer out of
// reach; without a recorded member it records nothing, and without either
// tombstone it guesses nothing.
func TestTheServersOwnTombstoneIsRecorded(t *testing.T) {
	dir := t.TempDir()
	st := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")}
	w := &tombstone.Watcher{Etcd: unreachable{}, State: st, Clock: clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	ctx := context.Background()
	if gone, err := w.Check(ctx); err != nil || gone {
		t.Fatalf("no member, no tombstone, no answer: Check = %v %v, want nothing", gone, err)
	}
	if err := st.SetMember(hoststate.Member{ID: "1001", ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if gone, err := w.Check(ctx); err != nil || gone {
		t.Fatalf("a recorded member and no answer: Check = %v %v, want nothing (no guess)", gone, err)
	}
	if err := os.MkdirAll(filepath.Join(st.MemberDataDir, "etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.ServerTombstonePath(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if gone, err := w.Check(ctx); err != nil || !gone {
		t.Fatalf("the server's own tombstone: Check = %v %v, want gone", gone, err)
	}
	ts, err := st.Tombstone()
	if err != nil || ts == nil {
		t.Fatalf("holdfast's tombstone: %+v %v", ts, err)
	}
	if ts.MemberID != "1001" || ts.ClusterID != "c1" || !strings.Contains(ts.How, st.ServerTombstonePath()) {
		t.Fatalf("tombstone %+v, want member 1001 of c1 naming the server's tombstone", ts)
	}
}

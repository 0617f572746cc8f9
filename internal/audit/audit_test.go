package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestEveryRecordIsOneJSONLineWithTimeComponentAndTheDecision(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 9, 22, 10, 0, 0, 0, time.FixedZone("CEST", 2*3600)))
	var buf bytes.Buffer
	l := New(&buf, "units", clk)
	if err := l.Write(Record{Object: Unit("plant", "kiln-1"), Epoch: 4, Node: "edge-1", Verdict: "SelfFenced/Unreachable",
		Actor: "holdfast-controller/ctl-0", Reason: "LeaseExpired", Message: "line one\nline two"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("a record with a newline in its message must stay one line, got %d: %q", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"time": "2026-09-22T08:00:00Z", "component": "units", "epoch": float64(4),
		"node": "edge-1", "verdict": "SelfFenced/Unreachable", "actor": "holdfast-controller/ctl-0",
		"reason": "LeaseExpired", "message": "line one\nline two",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if obj, _ := got["object"].(map[string]any); obj["kind"] != "Unit" || obj["namespace"] != "plant" || obj["name"] != "kiln-1" {
		t.Errorf("object = %v, want the Unit plant/kiln-1", got["object"])
	}
	if _, ok := got["swap"]; ok {
		t.Error("empty fields must be left out")
	}
}

func TestARecordWithoutReasonOrActorIsRefusedAndWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "units", clocktesting.NewFakePassiveClock(time.Now()))
	if err := l.Write(Record{Object: Unit("plant", "kiln-1"), Reason: "LeaseExpired"}); err == nil {
		t.Error("a record without an actor must be refused")
	}
	if err := l.Write(Record{Object: Unit("plant", "kiln-1"), Actor: "x"}); err == nil {
		t.Error("a record without a reason must be refused")
	}
	if buf.Len() != 0 {
		t.Errorf("a refused record wrote %q", buf.String())
	}
}

func TestConcurrentWritersNeverInterleaveLinesInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, closer, err := Open(path, "units", clocktesting.NewFakePassiveClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = l.Write(Record{Object: Unit("plant", "u"), Epoch: int64(i + 1), Actor: "a", Reason: "Rebound", Message: strings.Repeat("x", 300)})
			}
		}()
	}
	wg.Wait()
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, line := range lines {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a line is not one JSON record: %v: %q", err, line)
		}
	}
}

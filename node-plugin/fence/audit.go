package fence

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/holdfast-io/holdfast/internal/atomicfile"
	"github.com/holdfast-io/holdfast/internal/audit"
)

// The agent's files in AuditDir. An action is audited before its Event can
// be posted (the apiserver may be away), so the audit is also the queue a
// restarted agent resumes from: the posted file names, by sandbox, the
// actions whose Event landed.
const (
	auditFile  = "fence-audit.jsonl"
	postedFile = "fence-events-posted"
)

// audit writes the action's line to the audit file and the log at once,
// and queues its Event.
func (a *Agent) audit(ctx context.Context, act Action) {
	klog.FromContext(ctx).Info("Fenced a runtime", "reason", act.Reason, "unit", klog.KRef(act.Namespace, act.Unit),
		"pod", act.Pod, "epoch", act.Epoch, "bindingEpoch", act.BindingEpoch, "sandbox", act.Sandbox, "message", act.Message)
	fences.WithLabelValues(act.Namespace, act.Unit, act.Reason).Inc()
	if a.AuditDir != "" {
		line, err := audit.Encode(a.auditRecord(act), audit.ComponentNodePlugin, act.At)
		if err == nil {
			err = appendLine(filepath.Join(a.AuditDir, auditFile), bytes.TrimSuffix(line, []byte("\n")))
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Writing the fence audit line")
		}
	}
	a.queue(act)
}

// auditRecord is the action's audit line: the runtime it stopped, of which
// unit, at which binding epoch, and why.
func (a *Agent) auditRecord(act Action) audit.Record {
	actor := "holdfast-node"
	if a.Node != "" {
		actor += "/" + a.Node
	}
	return audit.Record{Actor: actor, Reason: act.Reason, Message: act.Message,
		Object: audit.Unit(act.Namespace, act.Unit), Epoch: act.BindingEpoch, Node: a.Node,
		Runtime: &audit.Runtime{Pod: act.Pod, Epoch: act.Epoch, Sandbox: act.Sandbox, Containers: act.Containers}}
}

// legacyLine is an audit line as the node plugin wrote it before the
// audit trail had one schema (internal/audit): its epoch is the runtime's,
// and it has no component. Recover still reads such lines, which may be on
// the node when the plugin is upgraded.
type legacyLine struct {
	At           time.Time `json:"at"`
	Reason       string    `json:"reason"`
	Namespace    string    `json:"namespace"`
	Unit         string    `json:"unit"`
	Pod          string    `json:"pod"`
	Epoch        int64     `json:"epoch"`
	BindingEpoch int64     `json:"bindingEpoch"`
	Sandbox      string    `json:"sandbox"`
	Containers   []string  `json:"containers"`
	Message      string    `json:"message"`
}

// readAction reads an action back from its audit line, in either schema.
func readAction(line []byte) (Action, error) {
	var rec audit.Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return Action{}, err
	}
	if rec.Component == "" {
		var l legacyLine
		if err := json.Unmarshal(line, &l); err != nil {
			return Action{}, err
		}
		return Action{At: l.At, Reason: l.Reason, Namespace: l.Namespace, Unit: l.Unit, Pod: l.Pod, Epoch: l.Epoch,
			BindingEpoch: l.BindingEpoch, Sandbox: l.Sandbox, Containers: l.Containers, Message: l.Message}, nil
	}
	act := Action{At: rec.Time, Reason: rec.Reason, BindingEpoch: rec.Epoch, Message: rec.Message}
	if rec.Object != nil {
		act.Namespace, act.Unit = rec.Object.Namespace, rec.Object.Name
	}
	if r := rec.Runtime; r != nil {
		act.Pod, act.Epoch, act.Sandbox, act.Containers = r.Pod, r.Epoch, r.Sandbox, r.Containers
	}
	return act, nil
}

func (a *Agent) queue(act Action) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= maxPendingActions {
		return
	}
	a.pending = append(a.pending, act)
}

// Flush posts the Events of queued actions; call it while the apiserver
// answers. Actions whose Event fails stay queued; one that lands is
// recorded as posted, so a restarted agent does not post it again.
func (a *Agent) Flush(ctx context.Context) {
	a.mu.Lock()
	pending := a.pending
	a.pending = nil
	a.mu.Unlock()
	var left []Action
	for _, act := range pending {
		if a.Notifier == nil {
			continue
		}
		if err := a.Notifier.Fenced(ctx, act); err != nil {
			left = append(left, act)
			continue
		}
		if a.AuditDir != "" && act.Sandbox != "" {
			if err := appendLine(filepath.Join(a.AuditDir, postedFile), []byte(act.Sandbox)); err != nil {
				klog.FromContext(ctx).Error(err, "Recording a fence Event as posted", "sandbox", act.Sandbox)
			}
		}
	}
	a.mu.Lock()
	a.pending = append(left, a.pending...)
	a.mu.Unlock()
}

// Recover queues the Events of audited actions that were never posted: a
// fence done while the apiserver was away, by an agent that restarted
// before it came back, still reaches the unit's Events. Call it once,
// before the agent's first pass. A line torn by a crash is skipped.
func (a *Agent) Recover(ctx context.Context) (int, error) {
	if a.AuditDir == "" {
		return 0, nil
	}
	if err := endLastLine(filepath.Join(a.AuditDir, auditFile)); err != nil {
		return 0, err
	}
	posted := map[string]bool{}
	if err := readLines(filepath.Join(a.AuditDir, postedFile), func(l []byte) { posted[string(l)] = true }); err != nil {
		return 0, err
	}
	var unposted []Action
	err := readLines(filepath.Join(a.AuditDir, auditFile), func(l []byte) {
		act, err := readAction(l)
		if err != nil {
			klog.FromContext(ctx).Info("Skipping an unreadable fence audit line", "line", string(l), "err", err)
			return
		}
		if act.Sandbox != "" && !posted[act.Sandbox] {
			unposted = append(unposted, act)
		}
	})
	if err != nil {
		return 0, err
	}
	// The newest ones, as many as the queue holds.
	if len(unposted) > maxPendingActions {
		unposted = unposted[len(unposted)-maxPendingActions:]
	}
	for _, act := range unposted {
		a.queue(act)
	}
	return len(unposted), nil
}

// endLastLine ends a line torn by a crash, so the next one appended is
// read on its own.
func endLastLine(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || len(b) == 0 || b[len(b)-1] == '\n' {
		return nil
	}
	if err != nil {
		return err
	}
	return appendLine(path, nil)
}

func readLines(path string, each func([]byte)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			each(l)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

func appendLine(path string, line []byte) error {
	dir := filepath.Dir(path)
	_, dirErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if os.IsNotExist(dirErr) {
		// A new directory's name survives a crash only with its parent.
		if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if os.IsNotExist(statErr) {
		// A new log's name survives a crash only with its directory.
		return atomicfile.SyncDir(filepath.Dir(path))
	}
	return nil
}

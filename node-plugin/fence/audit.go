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

	"k8s.io/klog/v2"

	"github.com/holdfast-io/holdfast/internal/atomicfile"
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
		line, _ := json.Marshal(act)
		if err := appendLine(filepath.Join(a.AuditDir, auditFile), line); err != nil {
			klog.FromContext(ctx).Error(err, "Writing the fence audit line")
		}
	}
	a.queue(act)
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
		var act Action
		if err := json.Unmarshal(l, &act); err != nil {
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

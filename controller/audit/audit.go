// Package audit writes holdfast's audit trail: one JSON object per line, on a
// stream of its own, for every decision that moves or stops a role holder
// (fence verdicts, Holds, re-binds, suspensions, lease and leadership loss,
// voter swap steps). The unit controller and the voter controller share it.
//
// A line is written after the decision's Event, condition and metric, so a
// line on the trail means the decision was committed to the apiserver first.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/holdfast-io/holdfast/internal/atomicfile"

	"k8s.io/utils/clock"
)

// Record is one audit line. Time, Reason and Actor are always present; the
// rest as the decision has them.
type Record struct {
	// Time is when the line was written (UTC, RFC 3339 with nanoseconds).
	Time time.Time `json:"time"`
	// Component is the writer: "units" or "voters".
	Component string `json:"component"`
	// Unit is the unit's namespace/name.
	Unit string `json:"unit,omitempty"`
	// Swap is the voter swap ID.
	Swap string `json:"swap,omitempty"`
	// Epoch is the binding epoch the decision was taken at.
	Epoch int64 `json:"epoch,omitempty"`
	// Node is the node the decision concerns (the bound node, or the target).
	Node string `json:"node,omitempty"`
	// Verdict is a lease expiry's verdict (SelfFenced, StartupFailed) and
	// what the last renewal attempt got back.
	Verdict string `json:"verdict,omitempty"`
	// Actor is who decided: the controller process, or a person's request.
	Actor string `json:"actor"`
	// RequestID refers to the webhook's record of a person's request, which
	// names the requester.
	RequestID string `json:"requestID,omitempty"`
	// Reason is the stable reason, the same as the decision's Event reason.
	Reason string `json:"reason"`
	// Message says what happened, for a person.
	Message string `json:"message,omitempty"`
}

// Logger appends records to one stream. It is safe for concurrent use.
type Logger struct {
	mu        sync.Mutex
	w         io.Writer
	sync      func() error
	clock     clock.PassiveClock
	component string
}

// New writes lines for component to w, stamped by clk.
func New(w io.Writer, component string, clk clock.PassiveClock) *Logger {
	l := &Logger{w: w, clock: clk, component: component}
	if f, ok := w.(*os.File); ok {
		l.sync = f.Sync
	}
	return l
}

// Open opens the audit stream at path: "-" is standard output, anything else
// a file appended to (created 0600).
func Open(path, component string, clk clock.PassiveClock) (*Logger, io.Closer, error) {
	if path == "-" {
		return New(os.Stdout, component, clk), io.NopCloser(nil), nil
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit-log-path: %w", err)
	}
	if os.IsNotExist(statErr) {
		// A new file's name survives a crash only with its directory.
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("--audit-log-path: %w", err)
		}
	}
	return New(f, component, clk), f, nil
}

// Write stamps and appends one record. A file is synced before Write
// returns, so a line that was written survives a crash of the process.
func (l *Logger) Write(r Record) error {
	if r.Reason == "" || r.Actor == "" {
		return fmt.Errorf("audit record without reason or actor: %+v", r)
	}
	r.Time = l.clock.Now().UTC()
	r.Component = l.component
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(line); err != nil {
		return fmt.Errorf("writing the audit line: %w", err)
	}
	if l.sync != nil {
		// A pipe or terminal cannot be synced; that is not a lost line.
		_ = l.sync()
	}
	return nil
}

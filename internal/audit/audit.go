// Package audit is holdfast's audit trail: one JSON object per line, on a
// stream of its own, in one schema for every writer. The webhook writes a
// line for each person's request it allows (who asked), the unit and voter
// controllers one for every decision that moves or stops a role holder
// (fence verdicts, Holds, re-binds, suspensions, lease and leadership loss,
// voter swap steps), the node plugin one for every runtime it fences.
//
// A controller's line is written after the decision's Event, condition and
// metric, so a line on the trail means the decision was committed to the
// apiserver first.
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

// The writers, as Record.Component names them.
const (
	ComponentWebhook    = "webhook"
	ComponentUnits      = "units"
	ComponentVoters     = "voters"
	ComponentNodePlugin = "node-plugin"
)

// Record is one audit line. Time, Component, Actor and Reason are always
// present; the rest as the writer has them. A field means the same in
// every writer's lines.
type Record struct {
	// Time is when the line was written (UTC, RFC 3339 with nanoseconds).
	Time time.Time `json:"time"`
	// Component is the writer (ComponentWebhook, ...).
	Component string `json:"component"`
	// Actor is who asked or decided: the requesting user (webhook), the
	// controller process or a person's request (controller), the node
	// plugin on its node.
	Actor string `json:"actor"`
	// Groups are the requesting user's groups, as admission saw them.
	Groups []string `json:"groups,omitempty"`
	// Reason is what was done or asked, a stable name: the decision's
	// Event reason, or the kind of a person's request (ManualFailover, ...).
	Reason string `json:"reason"`
	// Message is why, in words: what the decision saw, or the person's own
	// words (the fence confirmation, the swap's reason).
	Message string `json:"message,omitempty"`
	// Object is what the line is about: the Unit, VoterSwap or Node.
	Object *Object `json:"object,omitempty"`
	// Epoch is the unit's binding epoch the decision was taken at.
	Epoch int64 `json:"epoch,omitempty"`
	// Node is the node the decision concerns: the bound node, or the node a
	// failover or swap moves to.
	Node string `json:"node,omitempty"`
	// Swap is the voter swap ID.
	Swap string `json:"swap,omitempty"`
	// Verdict is a lease expiry's verdict (SelfFenced, StartupFailed) and
	// what the last renewal attempt got back.
	Verdict string `json:"verdict,omitempty"`
	// Runtime is the runtime pod a fence stopped.
	Runtime *Runtime `json:"runtime,omitempty"`
	// AdmissionUID is the apiserver's UID of the admission request: it
	// joins the line to the apiserver's own audit log.
	AdmissionUID string `json:"admissionUID,omitempty"`
	// RequestID is the holdfast.io/request-id set beside a person's request
	// (kubectl holdfast sets a fresh one): the webhook's line, which names
	// the requester, and the controller's lines of the action carry the
	// same value, so the two join on it.
	RequestID string `json:"requestID,omitempty"`
	// DryRun marks a request the apiserver did not persist.
	DryRun bool `json:"dryRun,omitempty"`
}

// Object names the object a line is about.
type Object struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// Key is the object's namespace/name (its name when cluster-scoped).
func (o *Object) Key() string {
	if o == nil {
		return ""
	}
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// Unit names a Unit.
func Unit(namespace, name string) *Object {
	return &Object{Kind: "Unit", Namespace: namespace, Name: name}
}

// Runtime is a runtime pod as a fence found it.
type Runtime struct {
	Pod string `json:"pod"`
	// Epoch is the epoch the runtime was started at.
	Epoch      int64    `json:"epoch"`
	Sandbox    string   `json:"sandbox"`
	Containers []string `json:"containers"`
}

// Encode stamps r as written by component at now and returns its line,
// newline included. A record without actor or reason is refused.
func Encode(r Record, component string, now time.Time) ([]byte, error) {
	if r.Reason == "" || r.Actor == "" {
		return nil, fmt.Errorf("audit record without reason or actor: %+v", r)
	}
	r.Time = now.UTC()
	r.Component = component
	line, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
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
	line, err := Encode(r, l.component, l.clock.Now())
	if err != nil {
		return err
	}
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

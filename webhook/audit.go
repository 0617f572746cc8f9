package webhook

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Audit kinds: what a person asked for.
const (
	AuditManualFailover = "ManualFailover"
	AuditConfirmFenced  = "ConfirmFenced"
	AuditManualSwap     = "ManualSwap"
	AuditRestart        = "Restart"
	// AuditReportRepair: a person removed a node plugin's report (break-glass).
	AuditReportRepair = "ReportRepair"
)

// AuditRecord is the one JSON line written for each allowed manual failover,
// fence confirmation, restart and manual swap. Only admission sees who asked,
// so this record is where the requester is; the controller's audit line of
// what it did refers to it by the holdfast.io/request-id both carry.
type AuditRecord struct {
	Time  time.Time `json:"time"`
	Audit string    `json:"audit"`
	// AdmissionUID is the apiserver's UID of the admission request.
	AdmissionUID string   `json:"admissionUID"`
	User         string   `json:"user"`
	Groups       []string `json:"groups"`
	Object       AuditRef `json:"object"`
	// Target is the node a failover or swap moves to, when named.
	Target string `json:"target,omitempty"`
	// Reason is the person's words: the fence confirmation or the swap's
	// reason.
	Reason string `json:"reason"`
	// Request is the holdfast.io/request-id set beside the request
	// (kubectl holdfast sets a fresh one); the controller's audit lines of
	// the action carry the same value under the same key, so the two
	// trails join on it.
	Request string `json:"requestID,omitempty"`
	DryRun  bool   `json:"dryRun,omitempty"`
}

// AuditRef names the object a request was about.
type AuditRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

type auditLog struct {
	mu  sync.Mutex
	out io.Writer
}

// write emits one line; the lines of concurrent requests never interleave.
// A failed write is returned so the request can be refused rather than
// carried out unrecorded.
func (a *auditLog) write(rec AuditRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.out.Write(append(line, '\n'))
	return err
}

// record writes the audit lines of an allowed request, stamped with who asked.
func (a *auditLog) record(r requester, recs []AuditRecord, now time.Time) error {
	for _, rec := range recs {
		rec.Time = now.UTC()
		rec.AdmissionUID, rec.User, rec.Groups, rec.DryRun = r.UID, r.User, r.Groups, r.DryRun
		if err := a.write(rec); err != nil {
			return readFailed("writing the audit record", err)
		}
	}
	return nil
}

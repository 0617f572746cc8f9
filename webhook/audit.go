package webhook

import (
	"time"

	"github.com/holdfast-io/holdfast/internal/audit"
)

// Audit reasons: what a person asked for.
const (
	AuditManualFailover = "ManualFailover"
	AuditConfirmFenced  = "ConfirmFenced"
	AuditManualSwap     = "ManualSwap"
	AuditRestart        = "Restart"
	// AuditReportRepair: a person removed a node plugin's report (break-glass).
	AuditReportRepair = "ReportRepair"
)

// The webhook writes an audit line (internal/audit) for each allowed manual
// failover, fence confirmation, restart and manual swap. Only admission sees
// who asked, so its line is where the requester is; the controller's lines
// of what it did refer to it by the holdfast.io/request-id both carry.
type auditLog struct {
	log *audit.Logger
}

func newAuditLog(o *Options) *auditLog {
	return &auditLog{log: audit.New(o.Audit, audit.ComponentWebhook, nowClock(o.Now))}
}

// nowClock reads the webhook's Options.Now as a clock.
type nowClock func() time.Time

func (f nowClock) Now() time.Time                  { return f() }
func (f nowClock) Since(t time.Time) time.Duration { return f().Sub(t) }

// record writes the audit lines of an allowed request, stamped with who
// asked. A failed write is returned so the request is refused rather than
// carried out unrecorded; the lines of concurrent requests never
// interleave.
func (a *auditLog) record(r requester, recs []audit.Record) error {
	for _, rec := range recs {
		rec.Actor, rec.Groups, rec.AdmissionUID, rec.DryRun = r.User, r.Groups, r.UID, r.DryRun
		if err := a.log.Write(rec); err != nil {
			return readFailed("writing the audit record", err)
		}
	}
	return nil
}

package units

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Event reasons (the audit line carries the same reason). Stable: alerts and
// the batch-record assembler match on them. A suspension reads nothing like
// an ordinary failover, on purpose: reading as one is how the storm hid.
const (
	EventLeaseExpired          = "LeaseExpired"
	EventLeaseEstablished      = "LeaseEstablished"
	EventLeaseReestablished    = "LeaseReestablished"
	EventHold                  = "Hold"
	EventRestarted             = "Restarted"
	EventRebound               = "Rebound"
	EventManualRebind          = "ManualRebind"
	EventManualFailoverRefused = "ManualFailoverRefused"
	EventBudgetExhausted       = "BudgetExhausted"
	EventNoEligibleTarget      = "NoEligibleTarget"
	EventInvalidRequest        = "InvalidRequest"
	// EventLeadershipHoldOff: a decision that the lease's expiry allows
	// waits for this leader's hold-off (L6), once per wait. Without it a
	// failover's timeline has a gap that no Event explains.
	EventLeadershipHoldOff = "LeadershipHoldOff"
)

// Record is one decision of consequence: it becomes, in this order, an
// Event, a condition change (written with the status), a metric and one
// audit line.
type Record struct {
	Reason    string
	Type      string // corev1.EventTypeNormal or EventTypeWarning
	Message   string
	Epoch     int64
	Node      string
	Verdict   string
	RequestID string
	// Manual: the decision was a person's request.
	Manual bool
	// count bumps the record's metric.
	count func()
}

func warning(reason string) *Record { return &Record{Reason: reason, Type: corev1.EventTypeWarning} }
func normal(reason string) *Record  { return &Record{Reason: reason, Type: corev1.EventTypeNormal} }

var (
	leaseStateGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_unit_lease_state",
		Help: "The control lease state of each Failover unit's binding: 1 for the state it is in (Pending, Held, Expired).",
	}, []string{"namespace", "unit", "state"})
	leaseExpiries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_lease_expiries_total",
		Help: "Lease expiries by verdict: SelfFenced (the runtime held and fenced) or StartupFailed (a runtime that never came up).",
	}, []string{"namespace", "unit", "verdict"})
	leaseEstablished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_lease_established_total",
		Help: "First acknowledged renewals at a binding, and re-establishments after an expiry.",
	}, []string{"namespace", "unit", "kind"})
	holds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_holds_total",
		Help: "ISA-88 Holds issued, by cause (RuntimeLost, ManualFailover, HandOver).",
	}, []string{"namespace", "unit", "cause"})
	restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_restarts_total",
		Help: "Holds cleared by a person's restart.",
	}, []string{"namespace", "unit"})
	rebinds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_rebinds_total",
		Help: "Re-binds of a unit's runtime to a new epoch, by path (automatic, manual, handover).",
	}, []string{"namespace", "unit", "path"})
	budgetExhausted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_unit_budget_exhausted",
		Help: "1 while automatic re-binding of the unit is suspended: every free eligible standby was tried since its runtime was last confirmed. Critical.",
	}, []string{"namespace", "unit"})
	budgetExhaustions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_budget_exhaustions_total",
		Help: "Times automatic re-binding was suspended because every free eligible standby had been tried.",
	}, []string{"namespace", "unit"})
	requestOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_unit_request_outcomes_total",
		Help: "Outcomes that re-bound nothing: a manual failover refused, no eligible target, an invalid request.",
	}, []string{"namespace", "unit", "reason"})
)

func init() {
	metrics.Registry.MustRegister(leaseStateGauge, leaseExpiries, leaseEstablished, holds, restarts, rebinds,
		budgetExhausted, budgetExhaustions, requestOutcomes)
}

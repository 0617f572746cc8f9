// Package metrics is the unit runtime's Prometheus metrics.
package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/internal/leasetls"
)

const namespace = "holdfast_runtime"

// States are the lease states the lease_state metric reports.
var States = []leaseapi.State{leaseapi.Ungranted, leaseapi.Held, leaseapi.Holding, leaseapi.Fenced, leaseapi.Autonomous, leaseapi.Warm}

// Metrics are the runtime's collectors.
type Metrics struct {
	Fenced          prometheus.Gauge
	LeaseState      *prometheus.GaugeVec
	ScanDuration    prometheus.Histogram
	DriverConnected *prometheus.GaugeVec
	Writes          *prometheus.CounterVec
	Grants          *prometheus.CounterVec
	Unauthenticated *prometheus.CounterVec
	Adoptions       *prometheus.CounterVec
}

// Sources are read at scrape time.
type Sources struct {
	// Remaining until the lease deadline, and whether one was ever granted.
	Remaining func() (time.Duration, bool)
	// QueueDepth of the telemetry store-and-forward queue.
	QueueDepth func() int
	// CertificateExpiry of the lease endpoint's certificate; nil without
	// TLS.
	CertificateExpiry func() time.Time
}

// New registers the runtime's metrics on reg.
func New(reg prometheus.Registerer, src Sources) *Metrics {
	m := &Metrics{
		Fenced: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "fenced",
			Help: "1 while every output write is refused (Fenced, Ungranted or Warm), else 0."}),
		LeaseState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "lease_state",
			Help: "1 for the runtime's current lease state."}, []string{"state"}),
		ScanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "scan_duration_seconds",
			Help: "Duration of one scan (reads, control program, writes).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		DriverConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "driver_connected",
			Help: "1 while the field driver has a working connection."}, []string{"driver"}),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "output_writes_total",
			Help: "Output writes by kind (control, hold) and result (written, refused by the lease, later_owner: withheld because the device holds a later owner epoch, failed at the device)."},
			[]string{"kind", "result"}),
		Grants: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "lease_grants_total",
			Help: "Grants answered 200, by outcome (extended, no_ack, no_anchor, stale)."}, []string{"outcome"}),
		Unauthenticated: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "lease_grants_unauthenticated_total",
			Help: "Grants refused (403) before they were read because the sender did not prove to be the authorised grantor, by reason: plaintext (plain HTTP), no_certificate, untrusted_certificate (another CA, expired, or not a client certificate), wrong_identity (the lease CA's, naming another identity). None extended the lease. Any rise is someone other than the grantor reaching the lease port, or a grantor with broken credentials."},
			[]string{"reason"}),
		Adoptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "operating_point_total",
			Help: "How the operating point was taken before the first write: adopted from the device, restored from the state file, or adoption refused because the device could not answer."},
			[]string{"source"}),
	}
	reg.MustRegister(m.Fenced, m.LeaseState, m.ScanDuration, m.DriverConnected, m.Writes, m.Grants, m.Unauthenticated, m.Adoptions)
	for _, reason := range []string{leasetls.Plaintext, leasetls.NoCertificate, leasetls.Untrusted, leasetls.WrongIdentity} {
		m.Unauthenticated.WithLabelValues(reason)
	}
	if src.CertificateExpiry != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "lease_certificate_expiry_timestamp_seconds",
			Help: "When the lease endpoint's certificate expires (Unix seconds). The kubelet renews it through the lease signer and the runtime reloads it; one within hours of now is not being renewed, and the grantor stops granting once it has expired."},
			func() float64 { return float64(src.CertificateExpiry().Unix()) }))
	}
	if src.Remaining != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "lease_deadline_seconds",
			Help: "Seconds until the lease deadline on the runtime's monotonic clock (negative past it); NaN before the first grant."},
			func() float64 {
				rem, ok := src.Remaining()
				if !ok {
					return math.NaN()
				}
				return rem.Seconds()
			}))
	}
	if src.QueueDepth != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "telemetry_queue_depth",
			Help: "Publishes waiting in the telemetry store-and-forward queue."},
			func() float64 { return float64(src.QueueDepth()) }))
	}
	return m
}

// SetLeaseState records the reported lease state.
func (m *Metrics) SetLeaseState(s leaseapi.State) {
	for _, st := range States {
		v := 0.0
		if st == s {
			v = 1
		}
		m.LeaseState.WithLabelValues(string(st)).Set(v)
	}
	if s.WritesNothing() {
		m.Fenced.Set(1)
	} else {
		m.Fenced.Set(0)
	}
}

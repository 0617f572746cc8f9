// Package health is the runtime's gRPC health server with two named
// services (L9, #1918): readiness answers to the lease and the field
// drivers, liveness only to a stalled scan. A fence is not a death: a
// fenced runtime is NOT_SERVING for readiness and SERVING for liveness, so
// the kubelet never restarts the process that is holding the plant safe.
package health

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// MinStallBudget is the shortest time without a completed scan that
// liveness calls a stall.
const MinStallBudget = 60 * time.Second

// StallBudget is how long the scan may go without completing before
// liveness fails: 60s or ten scan intervals, whichever is longer.
func StallBudget(scanInterval time.Duration) time.Duration {
	return max(MinStallBudget, 10*scanInterval)
}

// DriverState is one field driver as readiness sees it.
type DriverState struct {
	Name      string
	Down      bool
	DownSince time.Time
}

// Checker computes the two verdicts from the runtime's state at the
// instant of the probe.
type Checker struct {
	Clock clock.PassiveClock
	// Fenced reports whether every output write is refused.
	Fenced func() bool
	// Warm reports whether the runtime is a warm standby bound to no epoch
	// yet; nil means never. A warm runtime writes nothing, yet is ready
	// while its drivers reach their devices: its pod's Ready then says it
	// can be promoted without a start (image pulled, program loaded,
	// devices connected and read), never that it writes, which only its
	// lease state says.
	Warm func() bool
	// Drivers reports the field drivers; none means readiness ignores them.
	Drivers func() []DriverState
	// DriverGrace is how long every driver may be gone before readiness
	// fails.
	DriverGrace time.Duration
	// ScanInterval sets the stall budget.
	ScanInterval time.Duration
	// LastScan is when the scan last completed (or started, before the
	// first scan completed).
	LastScan func() time.Time
}

// Readiness is NOT_SERVING while fenced (a warm standby excepted), or when
// every field driver has been gone past its grace.
func (c *Checker) Readiness() (bool, string) {
	if c.Fenced() && (c.Warm == nil || !c.Warm()) {
		return false, "fenced: the control lease does not permit output writes"
	}
	if c.Drivers == nil {
		return true, ""
	}
	ds := c.Drivers()
	if len(ds) == 0 {
		return true, ""
	}
	now := c.Clock.Now()
	for _, d := range ds {
		if !d.Down || now.Sub(d.DownSince) < c.DriverGrace {
			return true, ""
		}
	}
	return false, fmt.Sprintf("every field driver gone for more than %v", c.DriverGrace)
}

// Liveness is NOT_SERVING only when the scan has not completed within the
// stall budget. Fenced, holding and degraded are all alive.
func (c *Checker) Liveness() (bool, string) {
	budget := StallBudget(c.ScanInterval)
	if since := c.Clock.Now().Sub(c.LastScan()); since > budget {
		return false, fmt.Sprintf("scan stalled: no scan completed for %v (budget %v)", since.Round(time.Millisecond), budget)
	}
	return true, ""
}

// Verdict answers one service.
type Verdict func() (serving bool, reason string)

// Service implements grpc.health.v1.Health with the readiness service
// (also the unnamed overall status) and, when built with one, the liveness
// service. Any other name is NotFound, so a probe naming the wrong service
// fails on its first probe.
type Service struct {
	healthpb.UnimplementedHealthServer
	readiness Verdict
	liveness  Verdict
	// WatchInterval is how often Watch re-reads the verdict.
	WatchInterval time.Duration
}

// NewService builds the service; liveness may be nil, and then the
// liveness service is refused with NotFound.
func NewService(readiness, liveness Verdict) *Service {
	return &Service{readiness: readiness, liveness: liveness, WatchInterval: time.Second}
}

func (s *Service) verdict(service string) (Verdict, bool) {
	switch service {
	case "", holdfastv1.HealthServiceReadiness:
		return s.readiness, true
	case holdfastv1.HealthServiceLiveness:
		return s.liveness, s.liveness != nil
	}
	return nil, false
}

func servingStatus(ok bool) healthpb.HealthCheckResponse_ServingStatus {
	if ok {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// Check answers one probe.
func (s *Service) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	v, ok := s.verdict(req.GetService())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown health service %q (known: %q, %q)", req.GetService(),
			holdfastv1.HealthServiceReadiness, s.knownLiveness())
	}
	serving, _ := v()
	return &healthpb.HealthCheckResponse{Status: servingStatus(serving)}, nil
}

func (s *Service) knownLiveness() string {
	if s.liveness == nil {
		return ""
	}
	return holdfastv1.HealthServiceLiveness
}

// List answers every known service.
func (s *Service) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := map[string]*healthpb.HealthCheckResponse{}
	for _, name := range []string{"", holdfastv1.HealthServiceReadiness, holdfastv1.HealthServiceLiveness} {
		if v, ok := s.verdict(name); ok {
			serving, _ := v()
			out[name] = &healthpb.HealthCheckResponse{Status: servingStatus(serving)}
		}
	}
	return &healthpb.HealthListResponse{Statuses: out}, nil
}

// Watch sends the status now and at every change; an unknown service gets
// SERVICE_UNKNOWN and the stream stays open, as the protocol asks.
func (s *Service) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	t := time.NewTicker(s.WatchInterval)
	defer t.Stop()
	for {
		cur := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if v, ok := s.verdict(req.GetService()); ok {
			serving, _ := v()
			cur = servingStatus(serving)
		}
		if cur != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: cur}); err != nil {
				return err
			}
			last = cur
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-t.C:
		}
	}
}

// Server is the gRPC health server.
type Server struct {
	srv *grpc.Server
	ln  net.Listener
}

// Listen binds addr now and serves svc in the background.
func Listen(addr string, svc *Service) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health server: %w", err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	return &Server{srv: srv, ln: ln}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stop stops the server at once.
func (s *Server) Stop() { s.srv.Stop() }

package health_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime/health"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

var t0 = time.Date(2026, 9, 2, 19, 0, 0, 0, time.UTC)

type rig struct {
	clock   *testingclock.FakeClock
	keeper  *lease.Keeper
	checker *health.Checker
	drivers []health.DriverState
	last    time.Time
}

func newRig(t *testing.T) *rig {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	k, err := lease.NewKeeper(lease.Config{Unit: "plant/kiln-1", Epoch: 1, Mode: holdfastv1.Failover,
		LeaseDuration: 30 * time.Second, Clock: clk}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{clock: clk, keeper: k, last: t0}
	r.checker = &health.Checker{
		Clock: clk, DriverGrace: 60 * time.Second, ScanInterval: time.Second,
		Fenced:   func() bool { return k.Status().State.WritesNothing() },
		Drivers:  func() []health.DriverState { return r.drivers },
		LastScan: func() time.Time { return r.last },
	}
	return r
}

func dial(t *testing.T, svc *health.Service) healthpb.HealthClient {
	t.Helper()
	srv, err := health.Listen("127.0.0.1:0", svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, c healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, status.Code(err)
	}
	return resp.Status, codes.OK
}

func expect(t *testing.T, c healthpb.HealthClient, service string, want healthpb.HealthCheckResponse_ServingStatus, why string) {
	t.Helper()
	if got, code := check(t, c, service); code != codes.OK || got != want {
		t.Fatalf("%s: service %q answered %v (%v), want %v", why, service, got, code, want)
	}
}

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// L9, #1918: a fenced runtime is not ready and is alive, so the kubelet
// never restarts the process that is holding the plant safe.
func TestLivenessCheck_FencedRuntimeIsNotReadyAndAlive(t *testing.T) {
	r := newRig(t)
	c := dial(t, health.NewService(r.checker.Readiness, r.checker.Liveness))
	for _, svc := range []string{"", holdfastv1.HealthServiceReadiness} {
		expect(t, c, svc, notServing, "a Failover runtime not yet granted")
	}
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a Failover runtime not yet granted")

	r.grant()
	expect(t, c, holdfastv1.HealthServiceReadiness, serving, "a granted runtime")
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a granted runtime")

	for _, step := range []time.Duration{30 * time.Second, 15 * time.Second, 10 * time.Minute} {
		r.clock.Step(step)
		r.last = r.clock.Now() // the scan goes on through the hold and the fence
	}
	if s := r.keeper.Status().State; s != leaseapi.Fenced {
		t.Fatalf("state %s, want Fenced", s)
	}
	expect(t, c, holdfastv1.HealthServiceReadiness, notServing, "a runtime fenced for ten minutes")
	expect(t, c, "", notServing, "a runtime fenced for ten minutes")
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a runtime fenced for ten minutes")
}

// L9: liveness fails for a stalled scan and for nothing else.
func TestLivenessCheck_StalledScanIsDeath(t *testing.T) {
	r := newRig(t)
	r.checker.ScanInterval = 10 * time.Second // budget: max(60s, 10 intervals) = 100s
	c := dial(t, health.NewService(r.checker.Readiness, r.checker.Liveness))
	r.clock.Step(100 * time.Second)
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a scan 100s old, at the budget")
	r.clock.Step(time.Millisecond)
	expect(t, c, holdfastv1.HealthServiceLiveness, notServing, "a scan past its budget")
	r.last = r.clock.Now()
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a scan that completed again")

	if got := health.StallBudget(time.Second); got != 60*time.Second {
		t.Fatalf("StallBudget(1s) = %v, want the 60s floor", got)
	}
}

// L9: readiness fails when every field driver has been gone past its
// grace, and liveness does not: a restart reconnects no cable.
func TestReadinessFailsWhenEveryDriverIsGonePastItsGrace(t *testing.T) {
	r := newRig(t)
	r.keeper = nil
	r.checker.Fenced = func() bool { return false }
	c := dial(t, health.NewService(r.checker.Readiness, r.checker.Liveness))
	r.drivers = []health.DriverState{{Name: "a", Down: true, DownSince: t0}, {Name: "b"}}
	r.clock.Step(10 * time.Minute)
	r.last = r.clock.Now()
	expect(t, c, holdfastv1.HealthServiceReadiness, serving, "one driver of two gone")
	r.drivers[1] = health.DriverState{Name: "b", Down: true, DownSince: r.clock.Now().Add(-59 * time.Second)}
	expect(t, c, holdfastv1.HealthServiceReadiness, serving, "every driver gone, one inside its grace")
	r.clock.Step(2 * time.Second)
	r.last = r.clock.Now()
	expect(t, c, holdfastv1.HealthServiceReadiness, notServing, "every driver gone past its grace")
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "every driver gone past its grace")
}

// A warm standby writes nothing yet is ready while its drivers reach their
// devices: its pod's Ready says it can be promoted without a start. Every
// driver gone past its grace makes it not ready; once bound to an epoch it
// is an ordinary runtime, not ready until granted (L9).
func TestAWarmRuntimeIsReadyWhileItsDevicesAnswer(t *testing.T) {
	r := newRig(t)
	k, err := lease.NewKeeper(lease.Config{Unit: "plant/kiln-1", Warm: true, Mode: holdfastv1.Failover,
		LeaseDuration: 30 * time.Second, Clock: r.clock}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	r.keeper = k
	r.checker.Fenced = func() bool { return k.Status().State.WritesNothing() }
	r.checker.Warm = k.Warm
	c := dial(t, health.NewService(r.checker.Readiness, r.checker.Liveness))
	r.drivers = []health.DriverState{{Name: "a"}}
	expect(t, c, holdfastv1.HealthServiceReadiness, serving, "a warm runtime whose device answers")
	r.drivers[0] = health.DriverState{Name: "a", Down: true, DownSince: t0}
	r.clock.Step(61 * time.Second)
	r.last = r.clock.Now()
	expect(t, c, holdfastv1.HealthServiceReadiness, notServing, "a warm runtime whose device is gone past its grace")
	r.drivers[0] = health.DriverState{Name: "a"}
	expect(t, c, holdfastv1.HealthServiceReadiness, serving, "a warm runtime whose device answers again")
	if _, ok := k.Bind("plant/kiln-1", 4); !ok {
		t.Fatal("the warm Keeper refused its binding")
	}
	expect(t, c, holdfastv1.HealthServiceReadiness, notServing, "a warm runtime bound to its epoch, not yet granted")
	expect(t, c, holdfastv1.HealthServiceLiveness, serving, "a warm runtime bound to its epoch, not yet granted")
}

// A probe naming the wrong service fails loudly on its first probe.
func TestAnUnknownHealthServiceIsNotFound(t *testing.T) {
	r := newRig(t)
	c := dial(t, health.NewService(r.checker.Readiness, r.checker.Liveness))
	if _, code := check(t, c, "holdfast.readyness"); code != codes.NotFound {
		t.Fatalf("an unknown service answered %v, want NotFound", code)
	}
	noLiveness := dial(t, health.NewService(r.checker.Readiness, nil))
	if _, code := check(t, noLiveness, holdfastv1.HealthServiceLiveness); code != codes.NotFound {
		t.Fatalf("a server built without a liveness verdict answered the liveness service with %v, want NotFound", code)
	}
	expect(t, noLiveness, holdfastv1.HealthServiceReadiness, notServing, "readiness without liveness")
}

func TestWatchSendsEveryChange(t *testing.T) {
	r := newRig(t)
	svc := health.NewService(r.checker.Readiness, r.checker.Liveness)
	svc.WatchInterval = 10 * time.Millisecond
	c := dial(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: holdfastv1.HealthServiceReadiness})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.Status != notServing {
		t.Fatalf("first watch message %v, %v; want NOT_SERVING", m, err)
	}
	r.grant()
	if m, err := stream.Recv(); err != nil || m.Status != serving {
		t.Fatalf("watch after the grant %v, %v; want SERVING", m, err)
	}
	unknown, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := unknown.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("watch of an unknown service %v, %v; want SERVICE_UNKNOWN", m, err)
	}
}

// grant gives the runtime a 30s lease as the grantor does: a first grant
// that brings back the runtime's anchor, then one carrying it.
func (r *rig) grant() {
	_, first := r.keeper.Grant(&leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 1, DurationMillis: 30000, Grantor: "g", Seq: 1}, r.clock.Now())
	ack := int64(0)
	r.keeper.Grant(&leaseapi.Grant{Unit: "plant/kiln-1", Epoch: 1, DurationMillis: 30000, AckAgeMillis: &ack, Anchor: first.Anchor,
		Grantor: "g", Seq: 2}, r.clock.Now())
}

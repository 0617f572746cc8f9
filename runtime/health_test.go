package runtime_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/internal/testutil"
)

func probe(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("probe %q: %v", service, err)
	}
	return resp.Status
}

// L9 through the runtime: a runtime that has never been granted is fenced
// and alive; a scan wedged in the program kills liveness once past its
// budget, and nothing else does.
func TestTheRuntimesProbesAskTwoQuestions(t *testing.T) {
	wedge := make(chan struct{})
	wedged := make(chan struct{}, 1)
	f := start(t, opts{program: runtime.ProgramFunc(func(op, _ map[string]uint16) map[string]uint16 {
		wedged <- struct{}{}
		<-wedge
		return op
	})})
	t.Cleanup(func() { close(wedge) }) // runs before the runtime's Stop, which waits for the scan
	addr := f.rt.HealthAddr()
	if s := probe(t, addr, holdfastv1.HealthServiceReadiness); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness of an ungranted Failover runtime = %v", s)
	}
	if s := probe(t, addr, holdfastv1.HealthServiceLiveness); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of an ungranted Failover runtime = %v", s)
	}
	f.clock.Step(30 * time.Second)
	if s := probe(t, addr, holdfastv1.HealthServiceLiveness); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of a fenced runtime scanning every second = %v", s)
	}
	grantHTTP(t, f.url, 1, 0)
	<-wedged // the program is now stuck inside a scan
	f.clock.Step(61 * time.Second)
	testutil.Eventually(t, 5*time.Second, "liveness to fail on the stalled scan", func() bool {
		return probe(t, addr, holdfastv1.HealthServiceLiveness) == healthpb.HealthCheckResponse_NOT_SERVING
	})
}

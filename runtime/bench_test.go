package runtime_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
	"github.com/holdfast-io/holdfast/runtime/telemetry"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

// BenchmarkStartToLeaseEndpoint is the #1936 reading: from Start to the
// lease endpoint answering, with the coupler taking the connection and never
// answering and the broker a closed port. It should read in milliseconds.
func BenchmarkStartToLeaseEndpoint(b *testing.B) {
	sim, err := devicesim.Start(devicesim.Config{Address: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	link, err := devicesim.NewLink(sim.Addr(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer link.Close()
	log := klog.Background().V(10)
	for b.Loop() {
		b.StopTimer()
		tel, err := telemetry.New(telemetry.Config{BrokerURL: "mqtt://127.0.0.1:1", Unit: unit}, log)
		if err != nil {
			b.Fatal(err)
		}
		rt, err := runtime.New(runtime.Config{
			Lease:     lease.Config{Unit: unit, Epoch: 1, Mode: holdfastv1.Failover, LeaseDuration: leaseLength},
			LeaseAddr: "127.0.0.1:0", LeaseTLSDir: leaseTLSDir(b, 1), HealthAddr: "127.0.0.1:0",
			Drivers:   []driver.Driver{modbusDriver(b, "coupler-1", link.Addr(), 5*time.Second)},
			Telemetry: tel,
		}, log)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := rt.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		resp, err := http.Get("http://" + rt.LeaseAddr() + leaseapi.Path)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		b.StopTimer()
		link.Cut() // fail the held dial so Stop need not wait for it
		rt.Stop(context.Background())
		b.StartTimer()
	}
}

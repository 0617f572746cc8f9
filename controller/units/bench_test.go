package units

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
	runtimelease "github.com/holdfast-io/holdfast/runtime/lease"
)

type acquiredNow struct{}

func (acquiredNow) Acquire() time.Time { return time.Now() }

// BenchmarkWarmStart measures the leadership gap's warm-start term
// (leadership.WarmStartBudget): from acquisition to a grant that extends
// the lease at every runtime, against the runtime's own lease endpoint
// (runtime/lease's Keeper and Handler on loopback) from a cache of N units:
// the list, one grant with no age, and the one that carries it.
func BenchmarkWarmStart(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("units=%d", n), func(b *testing.B) {
			scheme := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(scheme)
			_ = holdfastv1.AddToScheme(scheme)
			var objs []client.Object
			keepers := make([]*runtimelease.Keeper, n)
			// The lease channel as the units role runs it: mutual TLS.
			ca := leasetlstest.NewCA(b, "bench-lease-ca")
			for i := range n {
				name := "unit-" + strconv.Itoa(i)
				k, err := runtimelease.NewKeeper(runtimelease.Config{Unit: "plant/" + name, Epoch: 1, Mode: holdfastv1.Failover,
					LeaseDuration: 30 * time.Second}, klog.Background())
				if err != nil {
					b.Fatal(err)
				}
				keepers[i] = k
				srv := ca.ServeRuntime(b, runtimelease.NewHandler(k, runtimelease.MutualTLS(func() *x509.CertPool { return ca.Roots }, lease.GrantorIdentity),
					klog.Background()), "plant/"+name, 1)
				port, _ := strconv.Atoi(srv.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):])
				u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: name},
					Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{LeasePort: int32(port)},
						Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 30}},
					Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 1, Pod: PodName(name, 1)}}}
				pod := RuntimePod(u, 1, Placement{})
				pod.Status.PodIP = "127.0.0.1"
				objs = append(objs, u, pod)
			}
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&holdfastv1.Unit{}).Build()
			b.ResetTimer()
			for range b.N {
				// The grantor's seq starts at the wall clock: a grant the
				// keeper took from this grantor has a seq above this.
				from := uint64(time.Now().UnixNano())
				g := grantor.New(grantor.Options{Name: "bench", TLS: ca.Grantor(b)})
				w := &WarmStart{Reader: reader, Grantor: g, Tenure: acquiredNow{}}
				if cnt, err := w.Run(context.Background()); err != nil || cnt != n {
					b.Fatalf("warm start found %d of %d: %v", cnt, n, err)
				}
				for _, k := range keepers {
					for {
						st := k.Status()
						if st.State == lease.Held && st.LastGrantor == "bench" && st.LastSeq > from {
							break
						}
						time.Sleep(50 * time.Microsecond)
					}
				}
				b.StopTimer()
				g.StopAll()
				b.StartTimer()
			}
		})
	}
}

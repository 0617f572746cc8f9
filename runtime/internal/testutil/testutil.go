// Package testutil holds helpers the runtime's tests share.
package testutil

import (
	"net"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Permit returns a permit at epoch from an Autonomy keeper (which permits
// every write), for driver tests that are not about the lease.
func Permit(t testing.TB, epoch int64) *lease.Permit {
	t.Helper()
	k, err := lease.NewKeeper(lease.Config{Unit: "plant/test", Epoch: epoch, Mode: holdfastv1.Autonomy,
		LeaseDuration: 30 * time.Second}, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := k.Acquire(lease.WriteControl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	return p
}

// FreePort returns a loopback address nothing listens on (connections to
// it are refused until something does).
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

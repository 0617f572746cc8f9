package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// Connected connects d and closes it when the test ends.
func Connected[D driver.Driver](t testing.TB, d D) D {
	t.Helper()
	if err := d.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// WriteAfterTheFence holds a driver to L3: a write whose permit lapsed
// while it waited (behind a dial, or a read on a dead link) is refused
// with lease.ErrFenced, not as a transport error. It takes a permit of a
// keeper granted at epoch 3 for 10s, lets the clock pass the deadline and
// the hold bound, then writes 7 at addr through d. The caller checks that
// the device saw nothing.
func WriteAfterTheFence(t testing.TB, d driver.Driver, addr uint16) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Now())
	k := GrantedKeeper(t, clk, 3, 10*time.Second)
	p, err := k.Acquire(lease.WriteControl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	clk.Step(15 * time.Second) // past deadline + hold bound while the write waited
	err = d.WriteRegisters(context.Background(), p, addr, []uint16{7})
	if !errors.Is(err, lease.ErrFenced) || driver.IsTransportError(err) {
		t.Fatalf("a write whose permit lapsed = %v, want ErrFenced and not a transport error", err)
	}
}

// PostGrant posts g to a runtime's lease endpoint at url through hc, as the
// grantor does, and returns the reply; any other answer than one fails t.
func PostGrant(t testing.TB, hc *http.Client, url string, g leaseapi.Grant) leaseapi.Reply {
	t.Helper()
	b, _ := json.Marshal(g)
	resp, err := hc.Post(url, "application/json", bytes.NewReader(b)) //nolint:noctx // a test's own loopback server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r leaseapi.Reply
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("grant answered %s", resp.Status)
	}
	return r
}

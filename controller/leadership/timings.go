// Package leadership is the grantor's election: its apiserver health check
// (its timings and the budget they are held against are policy's), the
// hold-off a new leader observes, and what the process does when its
// manager stops (release on a deliberate stop, stand
// down when leadership was lost without being asked). docs/design.md §3 L6.
package leadership

import (
	"os"
	"strconv"
	"time"
)

// DefaultLeaseStandDown is how long after the last renewal of its
// leadership a grantor whose leadership was lost without being asked goes on
// renewing what it holds: it clears the 60s
// ceiling of a control-plane VIP move on a healthy etcd by 30s. The
// grantor's other timings, and the gap they make, are policy's
// (policy.GrantorTimings): the webhook derives the lease floor from them.
const DefaultLeaseStandDown = 90 * time.Second

// MaxLeaseStandDown bounds the stand-down: a new leader holds automatic
// failover off for the stand-down + the lease + the margin after its
// acquisition, so a longer one stalls every failover after a leadership
// change that long, and is more often a unit typed wrong (90m for 90s).
const MaxLeaseStandDown = 10 * time.Minute

// SetAPIServerHealthCheck sets client-go's HTTP/2 health check of the
// apiserver connections this process builds from now on: client-go reads
// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS when it
// builds a transport, and from nowhere else, so call it before the first.
func SetAPIServerHealthCheck(readIdle, ping time.Duration) error {
	if err := os.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", strconv.Itoa(int(readIdle/time.Second))); err != nil {
		return err
	}
	return os.Setenv("HTTP2_PING_TIMEOUT_SECONDS", strconv.Itoa(int(ping/time.Second)))
}

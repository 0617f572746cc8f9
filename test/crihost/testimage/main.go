// Command testimage is the one static binary in the test images crihost
// builds: `pause` is a sandbox's pause process (blocks on signals, reaps
// children); `lease` serves a unit runtime's GET /v1/lease (api/lease
// Status) with a lease deadline fixed at start, for the fence agent's
// watchdog. It never fences itself unless told to: it plays a runtime that
// may be wedged.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testimage pause|lease [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pause":
		pause()
	case "lease":
		serveLease(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "testimage: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func pause() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}

func serveLease(args []string) {
	fs := flag.NewFlagSet("lease", flag.ExitOnError)
	addr := fs.String("listen", "127.0.0.1:0", "address of the lease endpoint")
	unit := fs.String("unit", "", "namespace/name of the unit")
	epoch := fs.Int64("epoch", 1, "binding epoch")
	mode := fs.String("mode", string(holdfastv1.Failover), "availability mode")
	deadlineIn := fs.Duration("deadline-in", time.Hour, "lease deadline, from start")
	holdBound := fs.Duration("hold-bound", 5*time.Second, "hold bound")
	fenceOnTime := fs.Bool("fence-on-time", false, "fence at deadline + hold bound, as a healthy runtime does")
	warm := fs.Bool("warm", false, "answer as a warm standby bound to no epoch: Warm, epoch 0, fenced, no deadline")
	_ = fs.Parse(args)
	start := time.Now()
	deadline := start.Add(*deadlineIn)
	http.HandleFunc(lease.Path, func(w http.ResponseWriter, r *http.Request) {
		if *warm {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(lease.Status{Unit: *unit, Mode: holdfastv1.Failover, State: lease.Warm, Fenced: true})
			return
		}
		now := time.Now()
		remaining := time.Until(deadline).Milliseconds()
		st := lease.Status{Unit: *unit, Mode: holdfastv1.AvailabilityMode(*mode), Epoch: *epoch,
			RemainingMillis: &remaining, Deadline: &deadline, HoldBoundMillis: holdBound.Milliseconds()}
		switch {
		case now.Before(deadline):
			st.State = lease.Held
		case *fenceOnTime && now.After(deadline.Add(*holdBound)):
			st.State, st.Fenced = lease.Fenced, true
		default:
			st.State = lease.Holding
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	if err := http.ListenAndServe(*addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

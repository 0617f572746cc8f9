package scenario

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/holdfast-io/holdfast/test/devicesim"
)

// DeviceEnv names the device mode a drill package's units use
// (devicesim.OwnerEpoch or devicesim.Plain), over what its Options say:
// make test-e2e runs the drills once in each.
const DeviceEnv = "HOLDFAST_E2E_DEVICE"

// Main is a drill package's TestMain: it starts the cluster o describes
// (given startWithin to come up), sets *world to it, runs the package's
// tests and stops the cluster, logging each stage to stderr under name. It
// exits with the tests' code, or 1 when the cluster did not start or did
// not stop clean, or 2 when DeviceEnv, InstallEnv or VotersLayoutEnv names
// nothing known.
func Main(m *testing.M, name string, startWithin time.Duration, o Options, world **World) {
	// The harness's clients log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	if v := os.Getenv(DeviceEnv); v != "" {
		mode, err := devicesim.ParseMode(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, DeviceEnv, err)
			os.Exit(2)
		}
		o.Device = mode
	}
	if v := os.Getenv(InstallEnv); v != "" {
		inst, err := ParseInstall(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, InstallEnv, err)
			os.Exit(2)
		}
		o.Install = inst
	}
	if v := os.Getenv(VotersLayoutEnv); v != "" && o.Voters != nil {
		l, err := ParseLayout(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(2)
		}
		o.Voters.Layout = l
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %6.1fs: %s\n", name, time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	o.Logf = logf
	w, err := Up(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: starting the cluster: %v\n", name, err)
		os.Exit(1)
	}
	*world = w
	logf("cluster up; holdfast installed as %s; the units' devices are in %s mode", w.Installed(), w.Device())
	code := m.Run()
	logf("drills done; stopping the cluster")
	if err := w.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stopping the cluster: %v\n", name, err)
		if code == 0 {
			code = 1
		}
	} else {
		logf("cluster stopped; nothing left behind")
	}
	os.Exit(code)
}

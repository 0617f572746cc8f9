// Command holdfast-controller is holdfast's leader-elected control plane.
// --role=units runs the control lease grantor and the unit availability
// controller; --role=voters runs the etcd voter swap controller, on its own
// election; --help documents every flag with its default and the
// inequality it takes part in.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-io/holdfast/controller/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command kubectl-holdfast is the kubectl plugin of holdfast (package
// kubectl-holdfast): `kubectl holdfast --help` lists its commands, their
// examples and the exit codes a script can rely on.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	plugin "github.com/holdfast-io/holdfast/kubectl-holdfast"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := plugin.Main(ctx, os.Args[1:], plugin.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

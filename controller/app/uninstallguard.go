package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/controller/uninstallguard"
)

// uninstallGuardRelease is the helm release the guard's refusal names.
var uninstallGuardRelease string

func init() {
	Register(&Role{
		Name:  "uninstall-guard",
		Short: "the chart's pre-delete hook: fails, naming them, while Units in Failover mode exist (docs/operations.md)",
		Flags: func(fs *flag.FlagSet, _ *Common) {
			fs.StringVar(&uninstallGuardRelease, "release", "holdfast", "")
			doc("release", "--role=uninstall-guard: the helm release whose uninstall the guard checks, named in the fix it prints (the release namespace is --leader-election-namespace).", "none")
		},
		Run: runUninstallGuard,
	})
}

func runUninstallGuard(ctx context.Context, c *Common) int {
	cfg, err := restConfig(c.Kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Loading the apiserver configuration")
		return 1
	}
	cl, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		klog.ErrorS(err, "Building the client")
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := uninstallguard.Check(ctx, cl, uninstallguard.Release{Name: uninstallGuardRelease, Namespace: c.Namespace}); err != nil {
		// The hook's container (terminationMessagePolicy
		// FallbackToLogsOnError) shows this in kubectl describe too.
		fmt.Fprintf(os.Stderr, "holdfast-controller: %v\n", err)
		return 1
	}
	fmt.Fprintln(os.Stdout, "holdfast-controller: no Unit runs in Failover mode; the uninstall goes on")
	return 0
}

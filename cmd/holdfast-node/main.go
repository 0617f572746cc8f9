// holdfast-node runs beside the kubelet as a DaemonSet: the role actuator,
// the tombstone watcher, the fence agent, image pre-staging and the node
// reporter (node-plugin/). `holdfast-node role-is server|agent` is the
// ExecCondition check for the server and agent units; `holdfast-node
// start-condition` is the server's, which the node plugin installs.
package main

import (
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/holdfast-io/holdfast/internal/version"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "role-is" {
		os.Exit(hoststate.RoleIsMain(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == nodeplugin.StartConditionCommand {
		os.Exit(nodeplugin.StartConditionMain(os.Args[2:], os.Stderr))
	}
	opts, err := nodeplugin.ParseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if opts.Version {
		version.Print(os.Stdout, "holdfast-node")
		return
	}
	ctrl.SetLogger(klog.NewKlogr())
	if err := nodeplugin.Run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), opts); err != nil {
		klog.ErrorS(err, "holdfast-node stopped")
		os.Exit(1)
	}
}

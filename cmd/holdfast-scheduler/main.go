// Command holdfast-scheduler is kube-scheduler with holdfast's three plugins
// registered: UnitPlacement, StandbyColocation and VoterEligibility. It runs
// as a second scheduler beside the cluster's own, with the profile
// holdfast-scheduler (scheduler-plugin/config/scheduler-config.yaml).
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/holdfast-io/holdfast/internal/version"
	_ "github.com/holdfast-io/holdfast/scheduler-plugin/apis/config/scheme" // the plugin args in the config scheme
	"github.com/holdfast-io/holdfast/scheduler-plugin/standbycolocation"
	"github.com/holdfast-io/holdfast/scheduler-plugin/unitplacement"
	"github.com/holdfast-io/holdfast/scheduler-plugin/votereligibility"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "holdfast-scheduler")
		fmt.Printf("kube-scheduler %s\n", version.Module("k8s.io/kubernetes"))
		return
	}
	version.Register(legacyregistry.Registerer())
	// The plugins' informer cache is controller-runtime's; it logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	command := app.NewSchedulerCommand(
		app.WithPlugin(unitplacement.Name, unitplacement.New),
		app.WithPlugin(standbycolocation.Name, standbycolocation.New),
		app.WithPlugin(votereligibility.Name, votereligibility.New),
	)
	os.Exit(cli.Run(command))
}

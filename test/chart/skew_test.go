package chart

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
)

// The chart states the truth about version skew: holdfast-scheduler embeds
// kube-scheduler of the pinned Kubernetes minor, which may not serve an older
// apiserver, so helm refuses a cluster one minor older and takes the pinned one.
func TestTheChartRefusesAClusterOlderThanItsScheduler(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(pinned.Minor)
	if err != nil {
		t.Fatal(err)
	}
	older, err := chartutil.ParseKubeVersion(fmt.Sprintf("v%s.%d.9", pinned.Major, minor-1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kv *chartutil.KubeVersion
		ok bool
	}{{pinned, true}, {older, false}} {
		inst := action.NewInstall(&action.Configuration{})
		inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
		inst.ReleaseName, inst.Namespace = "holdfast", Namespace
		inst.KubeVersion = tc.kv
		_, err := inst.Run(ch, nil)
		switch {
		case tc.ok && err != nil:
			t.Errorf("Kubernetes %s refused: %v", tc.kv, err)
		case !tc.ok && err == nil:
			t.Errorf("Kubernetes %s accepted: holdfast-scheduler %s may not serve it", tc.kv, KubeVersion)
		case !tc.ok && !strings.Contains(err.Error(), "kubeVersion"):
			t.Errorf("Kubernetes %s: the refusal does not name kubeVersion: %v", tc.kv, err)
		}
	}
}

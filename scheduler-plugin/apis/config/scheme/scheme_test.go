package scheme

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/apis/config"
)

// shippedConfig is the file the chart ships.
var shippedConfig = filepath.Join("..", "..", "..", "config", "scheduler-config.yaml")

func profile(t *testing.T, cfg *schedconfig.KubeSchedulerConfiguration, name string) *schedconfig.KubeSchedulerProfile {
	t.Helper()
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name {
			return &cfg.Profiles[i]
		}
	}
	t.Fatalf("no profile %q in %+v", name, cfg.Profiles)
	return nil
}

func argsOf(t *testing.T, prof *schedconfig.KubeSchedulerProfile, plugin string) runtime.Object {
	t.Helper()
	for _, pc := range prof.PluginConfig {
		if pc.Name == plugin {
			return pc.Args
		}
	}
	t.Fatalf("profile %s has no pluginConfig for %s", prof.SchedulerName, plugin)
	return nil
}

func TestShippedConfigLoadsAndRunsTheThreeFiltersFirst(t *testing.T) {
	cfg, err := LoadConfigFile(shippedConfig)
	if err != nil {
		t.Fatalf("the shipped scheduler configuration does not load: %v", err)
	}
	if !cfg.LeaderElection.LeaderElect || cfg.LeaderElection.ResourceName != "holdfast-scheduler" {
		t.Errorf("leader election = %+v, want on with resource holdfast-scheduler (two replicas must not both schedule)", cfg.LeaderElection)
	}
	prof := profile(t, cfg, holdfastv1.SchedulerName)
	ours := []string{"UnitPlacement", "StandbyColocation", "VoterEligibility"}
	var filters []string
	for _, p := range prof.Plugins.Filter.Enabled {
		filters = append(filters, p.Name)
	}
	if len(filters) < 3 || !cmp.Equal(filters[:3], ours) {
		t.Errorf("filter runs %v first, want %v", filters, ours)
	}
	if n := len(prof.Plugins.PreFilter.Enabled); n != 0 {
		t.Errorf("preFilter names %d plugins, want the default order: a PreFilter refusing before DynamicResources' breaks its PostFilter", n)
	}
	if bind := prof.Plugins.Bind.Enabled; len(bind) != 1 || bind[0].Name != "UnitPlacement" {
		t.Errorf("bind names %v, want UnitPlacement alone (then the default DefaultBinder): a runtime's node is recorded before it is bound", bind)
	}
	weights := map[string]int32{}
	for _, p := range prof.Plugins.MultiPoint.Enabled {
		weights[p.Name] = p.Weight
	}
	for _, name := range ours {
		if weights[name] < 10 {
			t.Errorf("%s has score weight %d in multiPoint, want at least 10 (above the default plugins)", name, weights[name])
		}
	}

	if diff := cmp.Diff(&config.UnitPlacementArgs{DedicatedStandbyWeight: 2, LoadWeight: 1}, argsOf(t, prof, "UnitPlacement")); diff != "" {
		t.Errorf("UnitPlacement args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&config.StandbyColocationArgs{DefaultPolicy: holdfastv1.ColocationWarn, PenaltyPerRuntime: 50}, argsOf(t, prof, "StandbyColocation")); diff != "" {
		t.Errorf("StandbyColocation args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&config.VoterEligibilityArgs{VoterPolicyName: "default", FsyncWeight: 1, PeerRTTWeight: 1}, argsOf(t, prof, "VoterEligibility")); diff != "" {
		t.Errorf("VoterEligibility args (-want +got):\n%s", diff)
	}
}

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: holdfast-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: UnitPlacement
          - name: StandbyColocation
          - name: VoterEligibility
`

func TestArgsDefaultWhenLeftOut(t *testing.T) {
	for name, body := range map[string]string{
		"no pluginConfig": "",
		"empty args": `    pluginConfig:
      - name: UnitPlacement
        args: {}
      - name: StandbyColocation
        args: {}
      - name: VoterEligibility
        args: {}
`,
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig([]byte(header + body))
			if err != nil {
				t.Fatal(err)
			}
			prof := profile(t, cfg, holdfastv1.SchedulerName)
			want := map[string]runtime.Object{
				"UnitPlacement":     &config.UnitPlacementArgs{DedicatedStandbyWeight: 2, LoadWeight: 1},
				"StandbyColocation": &config.StandbyColocationArgs{DefaultPolicy: holdfastv1.ColocationWarn, PenaltyPerRuntime: 50},
				"VoterEligibility":  &config.VoterEligibilityArgs{VoterPolicyName: "default", FsyncWeight: 1, PeerRTTWeight: 1},
			}
			for plugin, w := range want {
				if diff := cmp.Diff(w, argsOf(t, prof, plugin)); diff != "" {
					t.Errorf("%s defaults (-want +got):\n%s", plugin, diff)
				}
			}
		})
	}
}

func TestBadArgsAreRefusedWithTheirFieldPath(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		want       []string
	}{
		{
			name: "weight out of range",
			args: `      - name: UnitPlacement
        args:
          loadWeight: 101
`,
			want: []string{`profiles[0].pluginConfig[0].args.loadWeight: Invalid value: 101: must be between 0 and 100`},
		},
		{
			name: "both weights zero",
			args: `      - name: UnitPlacement
        args:
          loadWeight: 0
          dedicatedStandbyWeight: 0
`,
			want: []string{`profiles[0].pluginConfig[0].args.loadWeight: Invalid value: 0: must be above 0 when dedicatedStandbyWeight is 0`},
		},
		{
			name: "unknown policy and negative penalty",
			args: `      - name: StandbyColocation
        args:
          defaultPolicy: Allow
          penaltyPerRuntime: -1
`,
			want: []string{
				`profiles[0].pluginConfig[0].args.defaultPolicy: Unsupported value: "Allow": supported values: "Refuse", "Warn"`,
				`profiles[0].pluginConfig[0].args.penaltyPerRuntime: Invalid value: -1: must be between 0 and 100`,
			},
		},
		{
			name: "policy name not a DNS subdomain",
			args: `      - name: VoterEligibility
        args:
          voterPolicyName: Not_A_Name
`,
			want: []string{`profiles[0].pluginConfig[0].args.voterPolicyName: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain`},
		},
		{
			name: "unknown field",
			args: `      - name: UnitPlacement
        args:
          dedicatedWeight: 3
`,
			want: []string{`unknown field "dedicatedWeight"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig([]byte(header + "    pluginConfig:\n" + tc.args))
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
		})
	}
}

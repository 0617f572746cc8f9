package webhook

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// ConfigPath is the ValidatingWebhookConfiguration the suite installs and
// the chart renders.
const ConfigPath = "config/validating-webhook-configuration.yaml"

var saQuoted = regexp.MustCompile(`'(system:serviceaccount:[^']*)'`)

func readConfig(t *testing.T) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	data, err := os.ReadFile(ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var c admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("%s: %v", ConfigPath, err)
	}
	return &c
}

// The configuration and the server agree: every path it names is served,
// every served path is named, every guarded change fails closed, and the
// user names its matchConditions exempt are holdfast's defaults.
func TestConfigurationMatchesTheServer(t *testing.T) {
	c := readConfig(t)
	used := map[string]bool{}
	o := DefaultOptions()
	known := []string{o.Controller, ChartVotersUser, o.NodePlugin, o.Scheduler}
	for _, w := range c.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil {
			t.Fatalf("%s: no service path", w.Name)
		}
		p := *w.ClientConfig.Service.Path
		if !slices.Contains(Paths, p) {
			t.Errorf("%s: path %s is not served", w.Name, p)
		}
		used[p] = true
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy must be Fail", w.Name)
		}
		if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects must be None (audit lines are logs, not cluster changes)", w.Name)
		}
		for _, m := range w.MatchConditions {
			for _, q := range saQuoted.FindAllStringSubmatch(m.Expression, -1) {
				if !slices.Contains(known, q[1]) {
					t.Errorf("%s/%s names %s, none of holdfast's default users %v", w.Name, m.Name, q[1], known)
				}
			}
			// Only the voters role holds the swap Lease: only its renewals
			// skip the webhook, never the units role's.
			if m.Name == "not-a-controller-renewal" {
				if !strings.Contains(m.Expression, "'"+ChartVotersUser+"'") || strings.Contains(m.Expression, "'"+o.Controller+"'") {
					t.Errorf("%s/%s must exempt the renewals of %s alone:\n%s", w.Name, m.Name, ChartVotersUser, m.Expression)
				}
			}
		}
	}
	for _, p := range Paths {
		if !used[p] {
			t.Errorf("path %s is served but no webhook sends to it", p)
		}
	}
	if _, err := os.Stat(filepath.Join("config", filepath.Base(ConfigPath))); err != nil {
		t.Fatal(err)
	}
}

// Every example refusal the suite recorded is quoted, exactly, in the README.
func TestReadmeQuotesEveryRefusal(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "refusals", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded refusals: %v", err)
	}
	for _, f := range files {
		example, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		block := "```console\n" + strings.TrimRight(string(example), "\n") + "\n```"
		if !strings.Contains(string(readme), block) {
			t.Errorf("README.md does not quote %s exactly", f)
		}
	}
}

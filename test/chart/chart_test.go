package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-io/holdfast/policy"
	"github.com/holdfast-io/holdfast/test/testenv"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// helm lint, with the values schema, is clean for the defaults and every ci/ file.
func TestChartLints(t *testing.T) {
	root := repoRoot(t)
	cases, err := Cases(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 4 {
		t.Fatalf("want the defaults and at least three ci/ files, got %d cases", len(cases))
	}
	for _, c := range cases {
		msgs, err := Lint(root, c.Values)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, m := range msgs {
			t.Errorf("%s: helm lint: %s", c.Name, m)
		}
	}
}

// Every case renders, and what it renders is what the values ask for.
func TestChartRendersEveryCase(t *testing.T) {
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Cases(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		ms, notes, err := Render(ch, c.Values)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		kinds := map[string]int{}
		for _, m := range ms {
			kinds[m.Kind]++
		}
		if kinds["Deployment"] < 3 || kinds["DaemonSet"] != 1 || kinds["ValidatingWebhookConfiguration"] != 1 || kinds["ServiceAccount"] != kinds["Deployment"]+kinds["StatefulSet"]+kinds["DaemonSet"] {
			t.Errorf("%s: rendered kinds %v", c.Name, kinds)
		}
		// One account per workload: each controller role runs under its own.
		for _, m := range ms {
			if (m.Kind != "Deployment" && m.Kind != "StatefulSet") || !strings.HasPrefix(m.Name, "holdfast-controller-") {
				continue
			}
			want := map[string]string{"holdfast-controller-units": "holdfast-controller", "holdfast-controller-voters": "holdfast-controller-voters"}[m.Name]
			spec, _ := m.Object["spec"].(map[string]any)
			tmpl, _ := spec["template"].(map[string]any)
			pod, _ := tmpl["spec"].(map[string]any)
			if got := pod["serviceAccountName"]; got != want {
				t.Errorf("%s: %s runs as %v, want %s", c.Name, m.Name, got, want)
			}
		}
		if !strings.Contains(notes, "kubectl holdfast status") {
			t.Errorf("%s: NOTES.txt lacks the next steps:\n%s", c.Name, notes)
		}
	}
}

// containerArgs are the args the chart gives the component's container.
func containerArgs(t *testing.T, ms []Manifest, component string) []string {
	t.Helper()
	for _, m := range ms {
		if (m.Kind != "Deployment" && m.Kind != "StatefulSet" && m.Kind != "DaemonSet" && m.Kind != "Job") || !strings.HasPrefix(m.Name, "holdfast-"+component) {
			continue
		}
		spec, _ := m.Object["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		containers, _ := pod["containers"].([]any)
		c, _ := containers[0].(map[string]any)
		var args []string
		for _, a := range c["args"].([]any) {
			args = append(args, a.(string))
		}
		return args
	}
	t.Fatalf("no workload for %s in the chart", component)
	return nil
}

// L14: the units role and the webhook are given the grantor's timings from
// one place, controller.units.grantor, so the webhook's lease floor is the
// floor of the timings the grantor runs on; the defaults are the binaries'
// own, and a timing in the units role's extraArgs is refused.
func TestTheGrantorAndTheWebhookGetTheSameTimings(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	timings := func(args []string) []string {
		var out []string
		for _, a := range args {
			for _, f := range []string{policy.FlagElectionLeaseDuration, policy.FlagElectionRenewDeadline, policy.FlagElectionRetryPeriod,
				policy.FlagReadIdleTimeout, policy.FlagPingTimeout} {
				if strings.HasPrefix(a, "--"+f+"=") {
					out = append(out, a)
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		values string
		want   policy.GrantorTimings
	}{
		{"{}", policy.DefaultGrantorTimings()},
		{"controller: {units: {grantor: {electionLeaseDuration: 8s, electionRenewDeadline: 5s, electionRetryPeriod: 2s, apiserverReadIdleTimeout: 3s, apiserverPingTimeout: 1s}}}",
			policy.GrantorTimings{ElectionLeaseDuration: 8 * time.Second, ElectionRenewDeadline: 5 * time.Second, ElectionRetryPeriod: 2 * time.Second,
				ReadIdleTimeout: 3 * time.Second, PingTimeout: time.Second}},
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
			t.Fatal(err)
		}
		ms, _, err := Render(ch, v)
		if err != nil {
			t.Fatal(err)
		}
		units, webhook := timings(containerArgs(t, ms, "controller-units")), timings(containerArgs(t, ms, "webhook"))
		if want := tc.want.Args(); !slices.Equal(units, want) || !slices.Equal(webhook, want) {
			t.Errorf("values %s: the units role gets %v, the webhook %v; want both %v", tc.values, units, webhook, want)
		}
	}
	var v map[string]any
	if err := yaml.Unmarshal([]byte("controller: {units: {extraArgs: [--v=2, --leader-election-lease-duration=15s]}}"), &v); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Render(ch, v); err == nil || !strings.Contains(err.Error(), "controller.units.extraArgs: --leader-election-lease-duration=15s: set controller.units.grantor instead") {
		t.Fatalf("a timing in extraArgs, which the webhook would not see: %v", err)
	}
}

// values.schema.json refuses unknown keys and wrong types, naming the path.
func TestValuesSchemaRefusesUnknownKeysAndWrongTypes(t *testing.T) {
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"bogus: 1", []string{"bogus"}},
		{"webhook: {tls: {mode: generate, nope: x}}", []string{"/webhook/tls", "nope"}},
		{"controller: {replicas: two}", []string{"/controller/replicas", "integer"}},
		{"webhook: {tls: {mode: manual}}", []string{"/webhook/tls/mode"}},
		{"webhook: {swapGroups: []}", []string{"/webhook/swapGroups"}},
		{"controller: {units: {leaseStandDown: ninety}}", []string{"/controller/units/leaseStandDown"}},
		{"controller: {units: {grantor: {apiserverPingTimeout: 1500ms}}}", []string{"/controller/units/grantor/apiserverPingTimeout"}},
		{"node: {hostDir: var/lib/holdfast}", []string{"/node/hostDir"}},
		{"controller: {voters: {enabled: true, persistence: {enabled: true, size: lots}}}", []string{"/controller/voters/persistence/size"}},
		{"controller: {voters: {enabled: true, snapshotVolume: {hostPath: {path: /srv/snapshots}}}}", []string{"/controller/voters", "snapshotVolume"}},
		{"metrics: {prometheusRule: {enabled: yes please}}", []string{"/metrics/prometheusRule/enabled", "boolean"}},
		{"controller: {units: {leaseTLS: {mode: cert-manager}}}", []string{"/controller/units/leaseTLS/mode"}},
		{"controller: {units: {insecurePlaintextLease: \"no\"}}", []string{"/controller/units/insecurePlaintextLease", "boolean"}},
		{"crds: {keep: \"yes\"}", []string{"/crds/keep", "boolean"}},
		{"crds: {enabled: true, upgrade: true}", []string{"/crds", "upgrade"}},
		{"uninstall: {force: 1}", []string{"/uninstall/force", "boolean"}},
		{"uninstall: {guard: false}", []string{"/uninstall", "guard"}},
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
			t.Fatal(err)
		}
		_, _, err := Render(ch, v)
		if err == nil {
			t.Errorf("values %q rendered; the schema must refuse them", tc.values)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("values %q: error does not name %q:\n%v", tc.values, w, err)
			}
		}
	}
}

// Every value in values.yaml carries a comment: its own, or one on the
// mapping that holds it.
func TestValuesYAMLDocumentsEveryValue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(Dir(repoRoot(t)), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var undocumented []string
	var walk func(path string, m *yaml.Node)
	walk = func(path string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			switch {
			case strings.Contains(k.HeadComment, "# --"):
			case v.Kind == yaml.MappingNode && len(v.Content) > 0 && v.Style&yaml.FlowStyle == 0:
				walk(p, v)
			default:
				undocumented = append(undocumented, p)
			}
		}
	}
	walk("", doc.Content[0])
	if len(undocumented) > 0 {
		t.Fatalf("values.yaml: no '# --' comment documents %s", strings.Join(undocumented, ", "))
	}
}

// The chart's copies of the webhook's configuration and the scheduler's
// configuration are those files exactly, once their components are in the tree.
func TestChartFilesAreTheComponentsOwn(t *testing.T) {
	root := repoRoot(t)
	for chartFile, own := range map[string]string{
		"files/validating-webhook-configuration.yaml": "webhook/config/validating-webhook-configuration.yaml",
		"files/scheduler-config.yaml":                 "scheduler-plugin/config/scheduler-config.yaml",
	} {
		got, err := os.ReadFile(filepath.Join(Dir(root), chartFile))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, own))
		if os.IsNotExist(err) {
			// The component has not landed; the copy stands alone until then.
			t.Logf("%s is not in the tree yet; %s is the copy from its branch", own, chartFile)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("charts/holdfast/%s differs from %s: run make chart-files", chartFile, own)
		}
	}
}

func ExampleSplit() {
	ms, _ := Split("---\n# Source: holdfast/templates/a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: plant}\n")
	fmt.Println(ms[0].Source, ms[0].Kind, ms[0].Name, ms[0].Namespace)
	// Output: holdfast/templates/a.yaml ConfigMap a plant
}

// renderMonitoring renders the chart with ci/monitoring-values.yaml for a
// cluster that serves apiVersions.
func renderMonitoring(t *testing.T, apiVersions []string) []Manifest {
	t.Helper()
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(Dir(root), "ci", "monitoring-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	ms, _, err := RenderFor(ch, values, apiVersions)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// The Prometheus Operator's objects render only where the cluster serves
// their kinds, and every scrape keeps the metrics' own labels (a unit's
// namespace, not the target's).
func TestMonitoringRendersOnlyWhereItsKindsExist(t *testing.T) {
	without := renderMonitoring(t, nil)
	for _, m := range without {
		if m.Kind == "ServiceMonitor" || m.Kind == "PodMonitor" || m.Kind == "PrometheusRule" {
			t.Errorf("%s %s rendered for a cluster without its kind", m.Kind, m.Name)
		}
	}
	with := renderMonitoring(t, APIVersions)
	kinds := map[string]int{}
	for _, m := range with {
		kinds[m.Kind]++
		key := map[string]string{"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}[m.Kind]
		if key == "" {
			continue
		}
		eps, _ := m.Object["spec"].(map[string]any)[key].([]any)
		for _, ep := range eps {
			if hl, _ := ep.(map[string]any)["honorLabels"].(bool); !hl {
				t.Errorf("%s %s scrapes without honorLabels: the target's namespace would overwrite the metrics' own", m.Kind, m.Name)
			}
		}
		if len(eps) == 0 {
			t.Errorf("%s %s has no endpoints", m.Kind, m.Name)
		}
	}
	if kinds["ServiceMonitor"] == 0 || kinds["PodMonitor"] != 1 || kinds["PrometheusRule"] != 1 {
		t.Errorf("for a cluster with the Prometheus Operator: %v", kinds)
	}
}

// Every alert of the PrometheusRule watches a metric the code defines
// (docs/reference.md lists them, generated from the code and held current by
// docs/gen), with labels it has, and its runbook_url names a heading of
// docs/operations.md; the voter role's metrics wait for controller/voters.
func TestEveryAlertWatchesAMetricTheCodeDefines(t *testing.T) {
	root := repoRoot(t)
	ms := renderMonitoring(t, APIVersions)
	ref, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	// | `name` | kind | labels | component | help |
	defined := map[string][]string{}
	for _, line := range strings.Split(string(ref), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`holdfast_") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		defined[name] = labels
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var runbook []string // the headings' anchors
	for _, line := range strings.Split(string(ops), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			runbook = append(runbook, strings.ReplaceAll(strings.ToLower(strings.TrimSpace(h)), " ", "-"))
		}
	}
	_, votersErr := os.Stat(filepath.Join(root, "controller", "voters"))
	metric := regexp.MustCompile(`\bholdfast_[a-z0-9_]+`)
	// An alert on a component being down or on the webhook library's own
	// metrics reads the scrape of a holdfast Service.
	scrapeWatch := regexp.MustCompile(`(up|controller_runtime_webhook_[a-z_]+)\{job="holdfast-[a-z-]+-metrics"`)
	// Prometheus adds the target's labels to every series of a scrape
	// (honorLabels keeps a metric's own where they collide).
	targetLabels := []string{"job", "namespace", "instance", "pod"}
	by := regexp.MustCompile(`by \(([^)]*)\)|\{([a-z_]+)=`)
	alerts := 0
	for _, m := range ms {
		if m.Kind != "PrometheusRule" {
			continue
		}
		spec, _ := m.Object["spec"].(map[string]any)
		groups, _ := spec["groups"].([]any)
		for _, g := range groups {
			rules, _ := g.(map[string]any)["rules"].([]any)
			for _, r := range rules {
				rule := r.(map[string]any)
				expr, _ := rule["expr"].(string)
				alert, _ := rule["alert"].(string)
				alerts++
				url, _ := rule["annotations"].(map[string]any)["runbook_url"].(string)
				if _, anchor, _ := strings.Cut(url, "docs/operations.md#"); !slices.Contains(runbook, anchor) {
					t.Errorf("alert %s: runbook_url %q names no heading of docs/operations.md", alert, url)
				}
				names := metric.FindAllString(expr, -1)
				if len(names) == 0 && !scrapeWatch.MatchString(expr) {
					t.Errorf("alert %s watches no holdfast metric nor a holdfast Service's scrape: %s", alert, expr)
				}
				for _, name := range names {
					labels, ok := defined[name]
					if !ok {
						if strings.HasPrefix(name, "holdfast_voter") && os.IsNotExist(votersErr) {
							t.Logf("alert %s: %s belongs to the voter role, not in the tree yet", alert, name)
							continue
						}
						t.Errorf("alert %s watches %s, which no code defines (docs/reference.md)", alert, name)
						continue
					}
					for _, sub := range by.FindAllStringSubmatch(expr, -1) {
						for _, l := range strings.Split(sub[1]+sub[2], ",") {
							if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
								t.Errorf("alert %s groups or filters %s by %q; its labels are %v", alert, name, l, labels)
							}
						}
					}
				}
			}
		}
	}
	if alerts < 4 {
		t.Fatalf("the PrometheusRule has %d alerts, want at least 4 (lease expired, failover suspended, swap overdue, even voter count)", alerts)
	}
}

// L12 in the chart: the lease channel is mutual TLS unless the values say
// unsafe. By default the lease CA is generated and mounted into the units
// role (--lease-ca-dir) with the certificates RBAC; mode secret mounts the
// named Secret and needs its name; insecurePlaintextLease passes the unsafe
// flag and renders neither the CA nor its RBAC.
func TestTheLeaseChannelIsOnByDefault(t *testing.T) {
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	units := func(ms []Manifest) (args []string, secret string) {
		for _, m := range ms {
			if m.Kind != "Deployment" || m.Name != "holdfast-controller-units" {
				continue
			}
			spec := m.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			for _, a := range spec["containers"].([]any)[0].(map[string]any)["args"].([]any) {
				args = append(args, a.(string))
			}
			vols, _ := spec["volumes"].([]any)
			for _, v := range vols {
				if s, ok := v.(map[string]any)["secret"].(map[string]any); ok {
					secret = s["secretName"].(string)
				}
			}
		}
		return args, secret
	}
	rules := func(ms []Manifest) string {
		for _, m := range ms {
			if m.Kind == "ClusterRole" && m.Name == "holdfast-controller" {
				b, _ := yaml.Marshal(m.Object["rules"])
				return string(b)
			}
		}
		return ""
	}
	has := func(ms []Manifest, kind, name string) bool {
		return slices.ContainsFunc(ms, func(m Manifest) bool { return m.Kind == kind && m.Name == name })
	}
	for _, tc := range []struct {
		name, values string
		arg, secret  string
		rbac         bool
	}{
		{name: "defaults", arg: "--lease-ca-dir=/etc/holdfast/lease-ca", secret: "holdfast-lease-ca", rbac: true},
		{name: "an existing Secret", values: "controller: {units: {leaseTLS: {mode: secret, secretName: plant-lease-ca}}}",
			arg: "--lease-ca-dir=/etc/holdfast/lease-ca", secret: "plant-lease-ca", rbac: true},
		{name: "plain HTTP", values: "controller: {units: {insecurePlaintextLease: true}}", arg: "--insecure-plaintext-lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := renderYAML(t, ch, tc.values)
			args, secret := units(ms)
			if !slices.Contains(args, tc.arg) || secret != tc.secret {
				t.Fatalf("units role args %v, lease CA Secret %q; want %s and %q", args, secret, tc.arg, tc.secret)
			}
			if got := has(ms, "Secret", "holdfast-lease-ca"); got != (tc.name == "defaults") {
				t.Fatalf("renders the generated lease CA: %v", got)
			}
			r := rules(ms)
			if got := strings.Contains(r, "podcertificaterequests") && strings.Contains(r, "holdfast.io/lease") && strings.Contains(r, "clustertrustbundles"); got != tc.rbac {
				t.Fatalf("certificates RBAC rendered %v, want %v:\n%s", got, tc.rbac, r)
			}
		})
	}
	var v map[string]any
	_ = yaml.Unmarshal([]byte("controller: {units: {leaseTLS: {mode: secret}}}"), &v)
	if _, _, err := Render(ch, v); err == nil || !strings.Contains(err.Error(), "controller.units.leaseTLS.secretName is required") {
		t.Fatalf("mode secret without a name: %v", err)
	}
}

package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// HoldfastNamespace is the release namespace: the components' election
// Leases live here.
const HoldfastNamespace = holdfastNS

// EnsureNamespace creates a namespace unless it exists.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitHTTP waits until url (inside the hub) answers 200.
func (c *Cluster) waitHTTP(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	hc := c.HTTPClient()
	return poll(ctx, timeout, func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited: %s", p.p.Name, p.Tail(15))
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// schedulerConfig rewrites a KubeSchedulerConfiguration file for this
// cluster: its client connection and, when given, its profiles.
func (c *Cluster) schedulerConfig(src, dst, kubeconfig string, leaderElect bool, profiles []any) error {
	cfg := map[string]any{
		"apiVersion": "kubescheduler.config.k8s.io/v1",
		"kind":       "KubeSchedulerConfiguration",
	}
	if src != "" {
		raw, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 100, "burst": 200}
	le, _ := cfg["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	le["leaderElect"] = leaderElect
	cfg["leaderElection"] = le
	if profiles != nil {
		cfg["profiles"] = profiles
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, out, 0o644)
}

// StartDefaultScheduler starts the cluster's own kube-scheduler (the
// default-scheduler profile), which places everything that is not a unit
// runtime, such as the node plugin's DaemonSet pods.
func (c *Cluster) StartDefaultScheduler(ctx context.Context) (*Process, error) {
	kc, err := c.UserKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(c.Dir, "kube-scheduler.yaml")
	if err := c.schedulerConfig("", conf, kc, false, []any{map[string]any{"schedulerName": "default-scheduler"}}); err != nil {
		return nil, err
	}
	p, err := c.StartInHub("kube-scheduler", nil, filepath.Join(c.bins.Node, "kube-scheduler"),
		"--config", conf, "--bind-address", "127.0.0.1", "--secure-port", "10259", "--v", "1")
	if err != nil {
		return nil, err
	}
	return p, c.waitHTTPS(ctx, p, "https://127.0.0.1:10259/healthz", time.Minute)
}

// waitHTTPS waits until a component's self-signed health endpoint answers.
func (c *Cluster) waitHTTPS(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.Dial,
		TLSClientConfig: insecureTLS(), DisableKeepAlives: true}}
	return poll(ctx, timeout, func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited: %s", p.p.Name, p.Tail(15))
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// StartHoldfastScheduler starts holdfast-scheduler with the chart's
// configuration (scheduler-plugin/config/scheduler-config.yaml), as its
// service account user.
func (c *Cluster) StartHoldfastScheduler(ctx context.Context, name string, port int) (*Process, error) {
	bin, err := c.Binary("cmd/holdfast-scheduler")
	if err != nil {
		return nil, err
	}
	kc, err := c.UserKubeconfig(name, ServiceAccountUser("holdfast-scheduler"), "system:masters")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(c.Dir, name+".yaml")
	if err := c.schedulerConfig(filepath.Join(c.Root, "scheduler-plugin", "config", "scheduler-config.yaml"), conf, kc, true, nil); err != nil {
		return nil, err
	}
	if err := c.EnsureNamespace(ctx, holdfastNS); err != nil {
		return nil, err
	}
	p, err := c.StartInHub(name, nil, bin, "--config", conf, "--bind-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(port), "--v", "2")
	if err != nil {
		return nil, err
	}
	return p, c.waitHTTPS(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), time.Minute)
}

// Controller is one holdfast-controller process.
type Controller struct {
	*Process
	Identity string
	// Health and Metrics are base URLs inside the hub.
	Health, Metrics string
	// Audit is its audit trail file.
	Audit string
}

// StartController starts holdfast-controller --role role as identity, its
// probes and metrics on the hub's loopback at base and base+1.
func (c *Cluster) StartController(ctx context.Context, role, identity string, base int, extra ...string) (*Controller, error) {
	bin, err := c.Binary("cmd/holdfast-controller")
	if err != nil {
		return nil, err
	}
	kc, err := c.UserKubeconfig(identity, ServiceAccountUser("holdfast-controller"), "system:masters")
	if err != nil {
		return nil, err
	}
	if err := c.EnsureNamespace(ctx, holdfastNS); err != nil {
		return nil, err
	}
	ctl := &Controller{Identity: identity, Health: fmt.Sprintf("http://127.0.0.1:%d", base),
		Metrics: fmt.Sprintf("http://127.0.0.1:%d", base+1), Audit: filepath.Join(c.Dir, "logs", identity+".audit.jsonl")}
	args := append([]string{bin, "--role", role, "--kubeconfig", kc, "--identity", identity,
		"--leader-election-namespace", holdfastNS,
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", base),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", base+1),
		"--audit-log-path", ctl.Audit}, extra...)
	ctl.Process, err = c.StartInHub(identity, nil, args...)
	if err != nil {
		return nil, err
	}
	return ctl, c.waitHTTP(ctx, ctl.Process, ctl.Health+"/healthz", time.Minute)
}

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// SchedulerConfigYAML is holdfast-scheduler's configuration as the chart
// ships it (charts/holdfast/files is a copy, `make chart-files`).
const SchedulerConfigYAML = "scheduler-plugin/config/scheduler-config.yaml"

// StartHoldfastScheduler starts the built holdfast-scheduler in the hub with
// the shipped configuration (its profile, plugin arguments and leader
// election unchanged; only the client connection is this cluster's), as
// holdfast-scheduler's service-account user: the webhook lets no one else
// bind a runtime pod. name is the process (and election identity) name;
// its self-signed health endpoint listens on the hub's loopback at port.
func (c *Cluster) StartHoldfastScheduler(ctx context.Context, name string, port int) (*Process, error) {
	bin, err := c.Binary("cmd/holdfast-scheduler")
	if err != nil {
		return nil, err
	}
	kc, err := c.UserKubeconfig(name, ServiceAccountUser("holdfast-scheduler"), "system:masters")
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(c.Root, SchedulerConfigYAML))
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", SchedulerConfigYAML, err)
	}
	// The chart mounts the service account's token; here the kubeconfig
	// carries the same user name.
	cfg["clientConnection"] = map[string]any{"kubeconfig": kc}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(c.Dir, name+"-config.yaml")
	if err := os.WriteFile(conf, out, 0o644); err != nil {
		return nil, err
	}
	// The election Lease lives in the release namespace.
	if err := c.EnsureNamespace(ctx, holdfastNS); err != nil {
		return nil, err
	}
	certDir := filepath.Join(c.Dir, name+"-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	p, err := c.StartInHub(name, nil, bin, "--config", conf, "--bind-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(port), "--cert-dir", certDir, "--v", "2")
	if err != nil {
		return nil, err
	}
	return p, c.waitHTTPS(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), time.Minute)
}

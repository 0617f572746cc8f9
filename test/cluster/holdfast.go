package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-io/holdfast/test/devicesim"
)

// Ports of holdfast's processes in the hub, and of the devices in the field.
const (
	WebhookPort      = 9443
	PlantDevicePort  = 5020 // Modbus TCP or OPC UA
	PlantHTTPPort    = 5021
	holdfastNS       = "holdfast-system"
	webhookConfigYML = "webhook/config/validating-webhook-configuration.yaml"
)

// ServiceAccountUser is the user name holdfast's component name runs as, as
// under the chart (system:serviceaccount:holdfast-system:<name>).
func ServiceAccountUser(name string) string {
	return "system:serviceaccount:" + holdfastNS + ":" + name
}

// Binary builds a main package of this module (once per cluster) and returns
// its path.
func (c *Cluster) Binary(pkg string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.binaries == nil {
		c.binaries = map[string]string{}
	}
	if p, ok := c.binaries[pkg]; ok {
		return p, nil
	}
	dir := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	if err := buildBinary(c.Root, out, "./"+pkg); err != nil {
		return "", err
	}
	c.binaries[pkg] = out
	return out, nil
}

// Plant is the device simulator the units drive: a Modbus TCP device or an
// OPC UA server on the field network, reachable from every node over its
// field link, logging every write with its peer and time (and epoch, when
// it checks epochs).
type Plant struct {
	*Process
	// Address is the device's host:port the runtimes dial.
	Address string
	// HTTP is the base URL of its write log and control endpoint.
	HTTP string
	// WriteLog is the file every write is appended to.
	WriteLog string
	// Mode is the device's mode (devicesim.OwnerEpoch or devicesim.Plain).
	Mode devicesim.Mode
	// Protocol is what it speaks (devicesim.Modbus or devicesim.OPCUA).
	Protocol devicesim.Protocol
}

// StartPlant starts a device simulator speaking protocol in mode, the
// index-th (each unit drives its own device: the owner-epoch block is one
// per device).
func (c *Cluster) StartPlant(ctx context.Context, name string, index int, mode devicesim.Mode, protocol devicesim.Protocol) (*Plant, error) {
	bin, err := c.Binary("cmd/device-simulator")
	if err != nil {
		return nil, err
	}
	p := &Plant{Address: fmt.Sprintf("%s:%d", FieldIP, PlantDevicePort+2*index),
		HTTP:     fmt.Sprintf("http://%s:%d", FieldIP, PlantHTTPPort+2*index),
		WriteLog: filepath.Join(c.Dir, "logs", name+"-writes.jsonl"), Mode: mode, Protocol: protocol}
	p.Process, err = c.StartInField(name, nil, bin, "--listen", p.Address, "--mode", string(mode), "--protocol", string(protocol),
		"--http", fmt.Sprintf("%s:%d", FieldIP, PlantHTTPPort+2*index), "--write-log", p.WriteLog)
	if err != nil {
		return nil, err
	}
	hc := c.HTTPClient()
	return p, Poll(ctx, 30*time.Second, func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("device-simulator exited: %s", p.Tail(10))
		}
		resp, err := hc.Get(p.HTTP + "/epoch")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// StartWebhook starts holdfast-webhook in the hub, with extra flags, and
// registers it with the apiserver, with the rules of webhook/config (the
// chart renders the same), reached by URL rather than through a Service
// (there is no kube-proxy).
func (c *Cluster) StartWebhook(ctx context.Context, extra ...string) (*Process, error) {
	p, err := c.StartWebhookProcess(ctx, extra...)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(c.Root, webhookConfigYML))
	if err != nil {
		return nil, err
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &vwc); err != nil {
		return nil, fmt.Errorf("%s: %w", webhookConfigYML, err)
	}
	ca, err := os.ReadFile(c.pki.CAFile)
	if err != nil {
		return nil, err
	}
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		path := "/"
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		url := fmt.Sprintf("https://%s:%d%s", HubIP, WebhookPort, path)
		cc.Service, cc.URL, cc.CABundle = nil, &url, ca
	}
	return p, c.Client.Create(ctx, &vwc)
}

// StartWebhookProcess starts the holdfast-webhook process (its certificate,
// its flags and extra) and waits until it is ready, registering nothing:
// StartWebhook registers it, and a drill that stopped it starts it again
// with this.
func (c *Cluster) StartWebhookProcess(ctx context.Context, extra ...string) (*Process, error) {
	bin, err := c.Binary("cmd/holdfast-webhook")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(c.Dir, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	cert, key, err := c.ServingCert("holdfast-webhook", HubIP)
	if err != nil {
		return nil, err
	}
	for src, dst := range map[string]string{cert: "tls.crt", key: "tls.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(certDir, dst), b, 0o600); err != nil {
			return nil, err
		}
	}
	kc, err := c.UserKubeconfig("holdfast-webhook", ServiceAccountUser("holdfast-webhook"), "system:masters")
	if err != nil {
		return nil, err
	}
	p, err := c.StartInHub("holdfast-webhook", []string{"KUBECONFIG=" + kc}, append([]string{bin,
		"--host", HubIP, "--port", fmt.Sprint(WebhookPort), "--cert-dir", certDir,
		"--health-probe-bind-address", "127.0.0.1:8181", "--metrics-bind-address", "127.0.0.1:8180",
		// The chart's split: each controller role under its own account.
		"--controller-service-account", holdfastNS + "/" + ControllerServiceAccount("units"),
		"--voters-service-account", holdfastNS + "/" + ControllerServiceAccount("voters")}, extra...)...)
	if err != nil {
		return nil, err
	}
	// Registered only once it answers: failurePolicy is Fail.
	hc := c.HTTPClient()
	if err := Poll(ctx, 60*time.Second, func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("holdfast-webhook exited: %s", p.Tail(10))
		}
		resp, err := hc.Get("http://127.0.0.1:8181/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return nil, err
	}
	return p, nil
}

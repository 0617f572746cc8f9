package cluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// HoldfastNamespace is the release namespace: the components' election
// Leases live here.
const HoldfastNamespace = holdfastNS

// EnsureNamespace creates a namespace unless it exists and waits until
// kube-controller-manager has given it what a pod needs before it can start
// there: the default ServiceAccount (admission refuses pods without it) and
// the kube-root-ca.crt ConfigMap (every projected token volume reads it).
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	var missing string
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		for _, obj := range []client.Object{&corev1.ServiceAccount{}, &corev1.ConfigMap{}} {
			key := client.ObjectKey{Namespace: name, Name: "default"}
			if _, ok := obj.(*corev1.ConfigMap); ok {
				key.Name = "kube-root-ca.crt"
			}
			if err := c.Client.Get(ctx, key, obj); err != nil {
				missing = fmt.Sprintf("%T %s: %v", obj, key, err)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("namespace %s: kube-controller-manager did not provide %s: %w", name, missing, err)
	}
	return nil
}

// waitHTTP waits until url (inside the hub) answers 200.
func (c *Cluster) waitHTTP(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	return waitOK(ctx, c.HTTPClient(), p, url, timeout)
}

// waitHTTPS waits until a component's self-signed health endpoint answers.
func (c *Cluster) waitHTTPS(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.Dial,
		TLSClientConfig: insecureTLS(), DisableKeepAlives: true}}
	return waitOK(ctx, hc, p, url, timeout)
}

// waitOK waits until url answers hc with 200, or p exits.
func waitOK(ctx context.Context, hc *http.Client, p *Process, url string, timeout time.Duration) error {
	return Poll(ctx, timeout, func() (bool, error) {
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

// LeaseCADir is the cluster's lease CA as the chart's Secret holdfast-lease-ca
// mounts it in the units role (tls.crt, tls.key, ca.crt): made once, shared
// by every units-role replica, read by each from the directory.
func (c *Cluster) LeaseCADir() (string, error) {
	c.leaseCAOnce.Do(func() {
		dir := filepath.Join(c.Dir, "lease-ca")
		ca, err := leasetlstest.MakeCA("holdfast-lease-ca")
		if err == nil {
			err = leasetlstest.WriteFiles(dir, ca.DirFiles(nil))
		}
		c.leaseCA, c.leaseCAErr = dir, err
	})
	return c.leaseCA, c.leaseCAErr
}

// ControllerServiceAccount is the service account holdfast-controller
// --role role runs as under the chart: the units role keeps
// holdfast-controller, the voters role has holdfast-controller-voters (the
// webhook's --voters-service-account).
func ControllerServiceAccount(role string) string {
	if role == "voters" {
		return "holdfast-controller-voters"
	}
	return "holdfast-controller"
}

// Controller is one holdfast-controller process.
type Controller struct {
	*Process
	Identity string
	// Health and Metrics are base URLs on the control network.
	Health, Metrics string
	// Audit is its audit trail file.
	Audit string
	// Host is the control host it runs on (nil for a chart's pod).
	Host *ControlHost
}

// StartController starts holdfast-controller --role role as identity on a
// control host of its own (the same one each time for an identity), its
// probes and metrics at the host's address on base and base+1. It runs as
// its role's service-account user (ControllerServiceAccount), as under the
// chart, so the webhook grants each role only its own rights.
func (c *Cluster) StartController(ctx context.Context, role, identity string, base int, extra ...string) (*Controller, error) {
	bin, err := c.Binary("cmd/holdfast-controller")
	if err != nil {
		return nil, err
	}
	kc, err := c.UserKubeconfig(identity, ServiceAccountUser(ControllerServiceAccount(role)), "system:masters")
	if err != nil {
		return nil, err
	}
	if err := c.EnsureNamespace(ctx, holdfastNS); err != nil {
		return nil, err
	}
	h, err := c.controlHost(identity)
	if err != nil {
		return nil, err
	}
	ctl := &Controller{Identity: identity, Host: h, Health: fmt.Sprintf("http://%s:%d", h.IP, base),
		Metrics: fmt.Sprintf("http://%s:%d", h.IP, base+1), Audit: filepath.Join(c.Dir, "logs", identity+".audit.jsonl")}
	if role == "units" && !slices.Contains(extra, "--insecure-plaintext-lease") {
		dir, err := c.LeaseCADir()
		if err != nil {
			return nil, err
		}
		extra = append([]string{"--lease-ca-dir", dir}, extra...)
	}
	args := append([]string{bin, "--role", role, "--kubeconfig", kc, "--identity", identity,
		"--leader-election-namespace", holdfastNS,
		"--health-probe-bind-address", fmt.Sprintf("%s:%d", h.IP, base),
		"--metrics-bind-address", fmt.Sprintf("%s:%d", h.IP, base+1),
		"--audit-log-path", ctl.Audit}, extra...)
	ctl.Process, err = c.startIn(h.Netns, identity, nil, args...)
	if err != nil {
		return nil, err
	}
	return ctl, c.waitHTTP(ctx, ctl.Process, ctl.Health+"/healthz", time.Minute)
}

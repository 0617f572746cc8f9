package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// etcdClientURL is the client URL of member i, on the hub's loopback.
func etcdClientURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 2379+10*i) }
func etcdPeerURL(i int) string   { return fmt.Sprintf("http://127.0.0.1:%d", 2380+10*i) }

// addProc records p for Stop; false once Stop has begun (p is then not
// recorded and must be stopped by the caller).
func (c *Cluster) addProc(p *proc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.procs = append(c.procs, p)
	return true
}

// StartInHub starts a process in the hub's network namespace, with its log
// under the cluster's logs directory. The cluster stops it on Stop.
func (c *Cluster) StartInHub(name string, env []string, argv ...string) (*Process, error) {
	return c.startIn(c.HubNetns, name, env, argv...)
}

// startIn starts a process in the network namespace ns (see StartInHub).
func (c *Cluster) startIn(ns, name string, env []string, argv ...string) (*Process, error) {
	p, err := startProc(name, filepath.Join(c.Dir, "logs", name+".log"), env, inNetns(ns, argv...)...)
	if err != nil {
		return nil, err
	}
	if !c.addProc(p) {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%s: the cluster is stopping", name)
	}
	return &Process{p}, nil
}

// Process is a process the cluster started.
type Process struct{ p *proc }

// PID is its process ID.
func (p *Process) PID() int { return p.p.PID() }

// Log is the path of its log.
func (p *Process) Log() string { return p.p.Log }

// Exited reports whether it has ended.
func (p *Process) Exited() bool { return p.p.Exited() }

// Stop stops it by its PID: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) { p.p.Stop(grace) }

// Kill sends SIGKILL and waits for it to end.
func (p *Process) Kill() { _ = p.p.cmd.Process.Kill(); _ = p.p.Wait() }

// Tail is the end of its log.
func (p *Process) Tail(lines int) string { return p.p.tail(lines) }

func (c *Cluster) startControlPlane(ctx context.Context, members, evictAfter int) error {
	if members < 1 {
		members = 1
	}
	if evictAfter == 0 {
		evictAfter = DefaultEvictionSeconds
	}
	c.EvictionSeconds = evictAfter
	// Members on the nodes (etcd_nodes.go) replace the hub's.
	if eps := c.EtcdEndpoints(); len(eps) > 0 {
		members = 0
	}
	var cluster []string
	for i := 0; i < members; i++ {
		cluster = append(cluster, fmt.Sprintf("e%d=%s", i, etcdPeerURL(i)))
	}
	var endpoints []string
	for i := 0; i < members; i++ {
		name := fmt.Sprintf("etcd-%d", i)
		if _, err := c.StartInHub(name, nil, filepath.Join(c.bins.K8s, "etcd"),
			"--name", fmt.Sprintf("e%d", i),
			"--data-dir", filepath.Join(c.Dir, name),
			"--listen-client-urls", etcdClientURL(i), "--advertise-client-urls", etcdClientURL(i),
			"--listen-peer-urls", etcdPeerURL(i), "--initial-advertise-peer-urls", etcdPeerURL(i),
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "hfe-"+c.ID,
			"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
			return err
		}
		endpoints = append(endpoints, etcdClientURL(i))
	}
	if members == 0 {
		endpoints = c.EtcdEndpoints()
	}
	serving, err := c.pki.issue("kube-apiserver", "kube-apiserver", nil,
		HubIP, "127.0.0.1", kubernetesServiceIP, "kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	kubeletClient, err := c.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	saPub, saKey, err := c.pki.serviceAccountKeys()
	if err != nil {
		return err
	}
	c.Kubeconfig, err = c.UserKubeconfig("admin", "kubernetes-admin", "system:masters")
	if err != nil {
		return err
	}
	if members > 0 {
		c.logf("starting etcd (%d) and kube-apiserver", members)
	} else {
		c.logf("starting kube-apiserver on the nodes' etcd %v", endpoints)
	}
	c.apiserverArgv = []string{filepath.Join(c.bins.K8s, "kube-apiserver"),
		"--etcd-servers", strings.Join(endpoints, ","),
		"--bind-address", "0.0.0.0", "--advertise-address", HubIP, "--secure-port", fmt.Sprint(APIServerPort),
		"--tls-cert-file", serving.Cert, "--tls-private-key-file", serving.Key,
		"--client-ca-file", c.pki.CAFile,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--default-not-ready-toleration-seconds", fmt.Sprint(evictAfter),
		"--default-unreachable-toleration-seconds", fmt.Sprint(evictAfter),
		"--allow-privileged",
		"--kubelet-client-certificate", kubeletClient.Cert, "--kubelet-client-key", kubeletClient.Key,
		"--kubelet-certificate-authority", c.pki.CAFile,
		"--kubelet-preferred-address-types", "InternalIP",
		// A webhook's Service is reached at its endpoints (the pod
		// network, podnet.go): there is no kube-proxy.
		"--enable-aggregator-routing=true",
		"--profiling=false", "--v", "1"}
	api, err := c.StartInHub("kube-apiserver", nil, c.apiserverArgv...)
	if err != nil {
		return err
	}
	c.apiserver = api
	if c.Config, err = c.restConfig(c.Kubeconfig); err != nil {
		return err
	}
	if c.Scheme, err = newScheme(); err != nil {
		return err
	}
	if c.Client, err = client.New(c.Config, client.Options{Scheme: c.Scheme}); err != nil {
		return err
	}
	rc, err := c.restClient()
	if err != nil {
		return err
	}
	if err := c.waitAPIServerReady(ctx, rc, api); err != nil {
		return err
	}
	if err := c.installCRDs(); err != nil {
		return err
	}
	c.logf("starting kube-controller-manager and kube-scheduler")
	if err := c.startKubeControllers(ctx); err != nil {
		return err
	}
	return c.EnsureNamespace(ctx, "default")
}

func (c *Cluster) waitAPIServerReady(ctx context.Context, rc *rest.RESTClient, api *Process) error {
	if err := Poll(ctx, 2*time.Minute, func() (bool, error) {
		if api.Exited() {
			return false, fmt.Errorf("kube-apiserver exited: %s", api.Tail(15))
		}
		body, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w; log:\n%s", err, api.Tail(15))
	}
	return nil
}

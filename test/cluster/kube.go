package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// The rest of a real control plane beside the apiserver, built from this
// module's graph like it (make k8s-bin): kube-controller-manager (the
// garbage collector, the node lifecycle controller and its taint-based
// evictions, the ReplicaSet, Deployment and DaemonSet controllers, service
// accounts and kube-root-ca.crt in every namespace, CSR signing) and
// kube-scheduler for every pod that names no other scheduler. Both run with
// their default settings in the hub, each as its own user
// (system:kube-controller-manager, system:kube-scheduler, which the
// apiserver's bootstrap RBAC knows), plus what a real cluster gives them:
// the service-account signing key, the cluster CA as the root CA and CSR
// signer, and per-controller service-account credentials.
//
// One departure: they run without leader election (--leader-elect=false).
// Each has one replica here, and an elected one exits when it cannot renew
// its election (an apiserver restart drill keeps the apiserver away for
// about a minute) for its kubelet to start it again; the hub has no kubelet.

// Ports of the two on the hub's loopback.
const (
	controllerManagerPort = 10257
	kubeSchedulerPort     = 10261
)

// DefaultEvictionSeconds is how long a pod stays on a node that went
// NotReady or unreachable before the taint manager evicts it, unless the
// pod tolerates longer: the apiserver's defaults (DefaultTolerationSeconds).
const DefaultEvictionSeconds = 300

func (c *Cluster) startKubeControllers(ctx context.Context) error {
	kcmConfig, err := c.UserKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	caKey, err := c.pki.writeKey()
	if err != nil {
		return err
	}
	_, saKey := c.pki.serviceAccountKeyFiles()
	kcm, err := c.StartInHub("kube-controller-manager", nil, filepath.Join(c.bins.K8s, "kube-controller-manager"),
		"--kubeconfig", kcmConfig, "--authentication-kubeconfig", kcmConfig, "--authorization-kubeconfig", kcmConfig,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(controllerManagerPort),
		"--service-account-private-key-file", saKey,
		"--root-ca-file", c.pki.CAFile,
		"--cluster-signing-cert-file", c.pki.CAFile, "--cluster-signing-key-file", caKey,
		"--use-service-account-credentials",
		"--leader-elect=false",
		"--profiling=false", "--v", "1")
	if err != nil {
		return err
	}
	schedConfig, err := c.UserKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	sched, err := c.StartInHub("kube-scheduler", nil, filepath.Join(c.bins.K8s, "kube-scheduler"),
		"--kubeconfig", schedConfig, "--authentication-kubeconfig", schedConfig, "--authorization-kubeconfig", schedConfig,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(kubeSchedulerPort),
		"--leader-elect=false",
		"--profiling=false", "--v", "1")
	if err != nil {
		return err
	}
	for p, port := range map[*Process]int{kcm: controllerManagerPort, sched: kubeSchedulerPort} {
		if err := c.waitHTTPS(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

//go:build integration

package nodeplugin_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/etcdproc"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
	"github.com/holdfast-io/holdfast/test/proc"
)

// staticKubelet stands in for the kubelet's static pod source for the etcd
// manifest only: it runs the manifest's command as a process (bin is the
// image's etcd), restarting it when it exits, publishes its mirror pod
// Running and Ready once etcd's health endpoint answers, and stops the
// process and deletes the mirror pod once the manifest is removed. The
// real-kubelet version of this test is the e2e one.
type staticKubelet struct {
	t    *testing.T
	cfg  actuator.StaticPodConfig
	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	body []byte
	pod  *corev1.Pod
	runs int
}

func startStaticKubelet(t *testing.T, cfg actuator.StaticPodConfig, bin string) *staticKubelet {
	k := &staticKubelet{t: t, cfg: cfg, bin: bin}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k.sync(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		k.stop()
	})
	return k
}

func (k *staticKubelet) sync(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	body, err := os.ReadFile(filepath.Join(k.cfg.ManifestsDir, actuator.EtcdManifest))
	if os.IsNotExist(err) {
		k.stopLocked()
		return
	}
	if err != nil {
		k.t.Errorf("kubelet: %v", err)
		return
	}
	if string(body) != string(k.body) {
		k.stopLocked()
		k.body = body
	}
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal(body, pod); err != nil {
		k.t.Errorf("kubelet: the etcd manifest: %v", err)
		return
	}
	running := k.cmd != nil
	if running {
		select {
		case <-k.done:
			running = false // restartPolicy Always: started again below
		default:
		}
	}
	if !running {
		args := pod.Spec.Containers[0].Command
		k.cmd = exec.Command(k.bin, args[1:]...)
		logf, err := os.OpenFile(k.cfg.State.MemberDataDir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			k.cmd.Stdout, k.cmd.Stderr = logf, logf
		}
		if err := k.cmd.Start(); err != nil {
			k.t.Errorf("kubelet: starting etcd: %v", err)
			return
		}
		k.runs++
		done := make(chan struct{})
		k.done = done
		cmd := k.cmd
		go func() { _ = cmd.Wait(); close(done) }()
		return
	}
	if k.pod != nil {
		return
	}
	// Published once etcd's health endpoint answers, as its startup probe.
	h := pod.Spec.Containers[0].StartupProbe.HTTPGet
	resp, err := http.Get(fmt.Sprintf("http://%s:%d%s", h.Host, h.Port.IntValue(), h.Path))
	if err != nil {
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	pod.Name += "-" + k.cfg.NodeName
	pod.Annotations["kubernetes.io/config.mirror"] = "mirror"
	pod.Spec.NodeName = k.cfg.NodeName
	if err := env.Client.Create(ctx, pod); err != nil {
		k.t.Errorf("kubelet: creating the mirror pod: %v", err)
		return
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		k.t.Errorf("kubelet: the mirror pod's status: %v", err)
		return
	}
	k.pod = pod
}

func (k *staticKubelet) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopLocked()
}

// stopLocked stops etcd, then deletes the mirror pod (the kubelet deletes
// it once the pod has terminated).
func (k *staticKubelet) stopLocked() {
	if k.cmd != nil {
		proc.Stop(k.cmd.Process, k.done, 10*time.Second)
		k.cmd = nil
	}
	if k.pod != nil {
		if err := env.Client.Delete(context.Background(), k.pod, client.GracePeriodSeconds(0)); err != nil {
			k.t.Errorf("kubelet: deleting the mirror pod: %v", err)
		}
		k.pod = nil
	}
	k.body = nil
}

func (k *staticKubelet) running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return false
	}
	select {
	case <-k.done:
		return false
	default:
		return true
	}
}

func https(u string) string { return strings.Replace(u, "http://", "https://", 1) }

func port(t *testing.T, u string) int {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(p.Port(), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStaticPodMemberJoinsARealEtcdAsALearnerAndLeaves runs the etcd
// manifest the actuator writes, with the certificates it issues, as a real
// etcd joining a real TLS cluster whose member has certificates of the same
// CA: promote until its mirror pod is Ready, promoted to a voter in the same
// cluster, step-down and removal, finish-demote with the data moved aside
// once the process has stopped.
func TestStaticPodMemberJoinsARealEtcdAsALearnerAndLeaves(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(env.BinDir, "etcd")
	const node, swap = "sp-4", "20260301T120000Z-sp-1-sp-4"
	ms, err := etcdproc.NewMembers("sp-1", node)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		ms[i].ClientURL, ms[i].PeerURL = https(ms[i].ClientURL), https(ms[i].PeerURL)
	}
	metrics := ports.Free(t, 1)[0]
	cfg := newStaticPodHost(t, node)
	cfg.ClientPort, cfg.MetricsPort = port(t, ms[1].ClientURL), metrics

	// The existing member: a host of the same etcd CA, its certificates
	// issued the same way.
	pki1 := t.TempDir()
	for _, f := range []string{actuator.EtcdCACert, actuator.EtcdCAKey} {
		b, err := os.ReadFile(filepath.Join(cfg.PKIDir, f))
		if err != nil {
			t.Fatal(err)
		}
		writeHostFile(t, filepath.Join(pki1, f), b)
	}
	if err := actuator.EnsureMemberCertificates(pki1, "sp-1", "127.0.0.1", time.Now()); err != nil {
		t.Fatal(err)
	}
	pki := func(f string) string { return filepath.Join(pki1, f) }
	cmd := etcdproc.Command(bin, ms[0], filepath.Join(t.TempDir(), "sp-1"), ms[0].Name+"="+ms[0].PeerURL, "new")
	cmd.Args = append(cmd.Args, "--cert-file="+pki(actuator.EtcdServerCert), "--key-file="+pki(actuator.EtcdServerKey),
		"--client-cert-auth", "--trusted-ca-file="+pki(actuator.EtcdCACert),
		"--peer-cert-file="+pki(actuator.EtcdPeerCert), "--peer-key-file="+pki(actuator.EtcdPeerKey),
		"--peer-client-cert-auth", "--peer-trusted-ca-file="+pki(actuator.EtcdCACert))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { proc.Stop(cmd.Process, exited, 10*time.Second) })

	clientCert, err := tls.LoadX509KeyPair(pki(actuator.APIServerEtcdClientCert), pki(actuator.APIServerEtcdClientKey))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki(actuator.EtcdCACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tlsCfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[0].ClientURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := etcdproc.WaitHealthy(ctx, cli); err != nil {
		t.Fatal(err)
	}
	before, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clusterID := before.Header.ClusterId

	// The controller's part: the candidate added as a learner, then its
	// promote step with the join.
	added, err := cli.MemberAddAsLearner(ctx, []string{ms[1].PeerURL})
	if err != nil {
		t.Fatal(err)
	}
	id := added.Member.ID
	createNode(t, node)
	cfg.Members = &tombstone.ClientEtcd{LocalEndpoint: ms[1].ClientURL, TLS: tlsCfg,
		Cluster: func(context.Context) ([]string, error) { return []string{ms[0].ClientURL}, nil }}
	startStaticPodPlugin(t, cfg)
	kubelet := startStaticKubelet(t, cfg, bin)
	holdLease(t, swap)
	setStep(t, node, holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote, etcdproc.InitialCluster(ms...))
	waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorDone)

	poll.Until(t, waitTimeout, "the learner promoted to a voter", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, etcdCallTimeout)
		defer cancel()
		_, err := cli.MemberPromote(c, id)
		return err == nil, fmt.Sprint(err)
	})
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Header.ClusterId != clusterID || len(list.Members) != 2 {
		t.Fatalf("after the promote: cluster %x with %d members, want cluster %x with 2", list.Header.ClusterId, len(list.Members), clusterID)
	}
	for _, m := range list.Members {
		if m.ID == id && (m.IsLearner || m.Name != node) {
			t.Fatalf("the new member: %+v, want voter %s", m, node)
		}
	}
	if _, err := cli.Put(ctx, "holdfast-test", "written through sp-1"); err != nil {
		t.Fatal(err)
	}
	cli4, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[1].ClientURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli4.Close()
	poll.Until(t, waitTimeout, "the new member serving the cluster's data", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, etcdCallTimeout)
		defer cancel()
		r, err := cli4.Get(c, "holdfast-test")
		if err != nil || len(r.Kvs) != 1 {
			return false, fmt.Sprint(r, err)
		}
		return string(r.Kvs[0].Value) == "written through sp-1", string(r.Kvs[0].Value)
	})

	setStep(t, node, holdfastv1.RoleAgent, swap, holdfastv1.RoleStepStepDown, "")
	waitReport(t, node, holdfastv1.RoleStepStepDown, holdfastv1.ActuatorDone)
	if !kubelet.running() {
		t.Fatal("step-down stopped etcd before its member was removed")
	}
	// etcd refuses a reconfiguration until its members have been connected
	// for 5 s: retried until it takes.
	poll.Until(t, waitTimeout, "the stepped-down member removed", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, etcdCallTimeout)
		defer cancel()
		_, err := cli.MemberRemove(c, id)
		return err == nil, fmt.Sprint(err)
	})
	setStep(t, node, holdfastv1.RoleAgent, swap, holdfastv1.RoleStepFinishDemote, "")
	waitReport(t, node, holdfastv1.RoleStepFinishDemote, holdfastv1.ActuatorDone)
	if kubelet.running() {
		t.Fatal("etcd still runs after finish-demote")
	}
	if _, err := os.Stat(filepath.Join(cfg.State.MovedAside(), "member")); err != nil {
		t.Fatalf("the member's data was not moved aside: %v", err)
	}
	if _, err := os.Stat(cfg.State.MemberDataDir); !os.IsNotExist(err) {
		t.Fatalf("the member data directory stays: %v", err)
	}
	list, err = cli.MemberList(ctx)
	if err != nil || len(list.Members) != 1 || list.Header.ClusterId != clusterID {
		t.Fatalf("after finish-demote: %v, %v", list, err)
	}
}

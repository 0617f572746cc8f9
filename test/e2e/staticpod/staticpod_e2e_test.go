//go:build e2e

// Package staticpod runs holdfast-node's static pod actuator (kubeadm's
// stacked etcd, node-plugin/actuator) under a real kubelet: the kubelet of
// a node with kubeadm's static pod path runs the etcd and kube-apiserver
// manifests the actuator writes, from images built locally from make
// k8s-bin's binaries, and the member joins the control plane's own etcd.
// Its own package and cluster; it runs under make test-e2e only.
package staticpod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/test/cluster"
	"github.com/holdfast-io/holdfast/test/etcdwatch"
	"github.com/holdfast-io/holdfast/test/poll"
)

const (
	// voter runs the control plane's etcd from the start (test/cluster's
	// server unit); node is the kubeadm host the actuator promotes.
	voter = "cp-a"
	node  = "kp-b"
	// etcdCall bounds one etcd call; within bounds one wait.
	etcdCall = 5 * time.Second
	within   = 4 * time.Minute
)

// TestStaticPodPromoteStepDownFinishDemote drives the static pod actuator
// through a member's life on a real kubelet, with a writer and a quorum
// sampler on the cluster throughout, the controller's part (learner add,
// promote, removal) done here against etcd:
//   - promote: the kubelet runs the etcd manifest (the start condition's
//     init container first); its member joins the control plane's etcd as
//     the learner added for it, the same cluster ID as seen from the member
//     itself; the kube-apiserver manifest only once the etcd mirror pod is
//     Ready; promoted to a voter, the member serves the cluster's data and
//     the kubelet's kube-apiserver serves from it;
//   - step-down: the apiserver manifest removed and its pod stopped (mirror
//     pod gone, no container in the CRI), the etcd pod untouched and its
//     member still voting;
//   - finish-demote, once the member is removed: the etcd manifest
//     removed, its pod stopped (mirror pod gone, no container), then and
//     only then the data moved aside (one copy), the member's certificates
//     and join target removed; the cluster one member of the same ID.
func TestStaticPodPromoteStepDownFinishDemote(t *testing.T) {
	// The harness's clients log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{
		Nodes:  []cluster.NodeSpec{{Name: voter, Etcd: cluster.EtcdVoter}, {Name: node, StaticPods: true}},
		Images: cluster.KubeadmImages(),
		Logf:   t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, c.Nodes[node])
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
		if left := c.LeftoversAfterExit(time.Minute); len(left) > 0 {
			t.Errorf("the cluster left behind: %v", left)
		}
	})
	t.Logf("cluster up in %v", time.Since(began).Round(time.Second))
	drill := time.Now()
	defer func() {
		t.Logf("drill wall time %v (with the cluster's start %v)", time.Since(drill).Round(time.Second), time.Since(began).Round(time.Second))
	}()

	h := provision(t, c, c.Nodes[node])
	cli, err := c.EtcdClient(c.EtcdEndpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	voters, learners, clusterID := etcdwatch.MembersOf(t, cli)
	if !slices.Equal(voters, []string{voter}) || len(learners) > 0 {
		t.Fatalf("start: voters %q learners %q, want %s alone", voters, learners, voter)
	}
	x := etcdwatch.Watch(cli, "/holdfast-writer/static-pod/")

	// The controller's part of the promote: the learner added, the join
	// (etcd's initial-cluster form, AnnotationRoleJoin) handed to the node.
	clientURL := fmt.Sprintf("http://%s:%d", h.n.IP, cluster.EtcdClientPort)
	peerURL := fmt.Sprintf("http://%s:%d", h.n.IP, cluster.EtcdPeerPort)
	added, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
	if err != nil {
		t.Fatal(err)
	}
	id := added.Member.ID
	join := voter + "=" + c.Nodes[voter].Host.PeerURL + "," + node + "=" + peerURL

	drive(t, "promote", within, func() error {
		_, err := h.act.Promote(ctx, join)
		return err
	}, func(error) {
		if h.manifestExists(t, actuator.APIServerManifest) {
			t.Fatal("the kube-apiserver manifest was written before the etcd mirror pod was Ready")
		}
	})
	etcd := h.mirror(t, c, "etcd")
	if ok, state := h.runningReady(t, etcd, actuator.EtcdManifest); !ok {
		t.Fatalf("the etcd mirror pod after promote: %s", state)
	}
	if n := h.running(t, "etcd", "etcd"); n != 1 {
		t.Fatalf("%d etcd containers run on %s, want 1", n, node)
	}
	if st := etcd.Status.InitContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("the start condition's init container: %+v, want one that exited 0", st)
	}
	// A learner of the same cluster, as etcd and the member itself say (it
	// answers once it serves clients, which its health endpoint, the
	// startup probe's, does not wait for).
	memberCluster := func() uint64 {
		var id uint64
		poll.Until(t, within, "the new member answering its status", func() (bool, string) {
			sctx, scancel := context.WithTimeout(ctx, etcdCall)
			defer scancel()
			st, err := cli.Status(sctx, clientURL)
			if err != nil {
				return false, err.Error()
			}
			id = st.Header.ClusterId
			return true, ""
		})
		return id
	}
	voters, learners, got := etcdwatch.MembersOf(t, cli)
	if got != clusterID || !slices.Equal(voters, []string{voter}) || !slices.Equal(learners, []string{node}) {
		// A learner that never joined has no name yet ("").
		t.Fatalf("after promote: cluster %x voters %q learners %q, want cluster %x, %s a learner", got, voters, learners, clusterID, node)
	}
	if got := memberCluster(); got != clusterID {
		t.Fatalf("the new member is of cluster %x, want %x: it bootstrapped a cluster of its own", got, clusterID)
	}

	poll.Until(t, within, "the learner promoted to a voter", func() (bool, string) {
		pctx, pcancel := context.WithTimeout(ctx, etcdCall)
		defer pcancel()
		_, err := cli.MemberPromote(pctx, id)
		return err == nil, fmt.Sprint(err)
	})
	if voters, learners, got := etcdwatch.MembersOf(t, cli); got != clusterID || !slices.Equal(voters, []string{voter, node}) || len(learners) > 0 {
		t.Fatalf("after the learner's promotion: cluster %x voters %q learners %q", got, voters, learners)
	}
	readThroughMember(t, ctx, c, clientURL)

	// The kubelet's kube-apiserver, on the member: Ready (its /readyz, etcd
	// included) and serving the cluster's objects.
	if !h.manifestExists(t, actuator.APIServerManifest) {
		t.Fatal("no kube-apiserver manifest after promote")
	}
	poll.Until(t, within, "the kube-apiserver mirror pod Running and Ready", func() (bool, string) {
		return h.runningReady(t, h.mirror(t, c, "kube-apiserver"), actuator.APIServerManifest)
	})
	if n := h.running(t, "kube-apiserver", "kube-apiserver"); n != 1 {
		t.Fatalf("%d kube-apiserver containers run on %s, want 1", n, node)
	}
	servesTheCluster(t, ctx, c, h.n)

	// Step-down: the apiserver out, the member still voting.
	etcdPID, err := h.n.ContainerPID(ctx, metav1.NamespaceSystem, "etcd-"+node, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	drive(t, "step-down", within, func() error { return h.act.StepDown(ctx) }, func(error) {
		if !h.manifestExists(t, actuator.EtcdManifest) {
			t.Fatal("step-down removed the etcd manifest: the member would stop while it still votes")
		}
	})
	if h.manifestExists(t, actuator.APIServerManifest) {
		t.Fatal("the kube-apiserver manifest stays after step-down")
	}
	if p := h.mirror(t, c, "kube-apiserver"); p != nil {
		t.Fatalf("the kube-apiserver mirror pod stays after step-down: %s", p.Status.Phase)
	}
	if n := h.running(t, "kube-apiserver", "kube-apiserver"); n != 0 {
		t.Fatalf("%d kube-apiserver containers still run after step-down (its mirror pod is gone)", n)
	}
	if !h.manifestExists(t, actuator.EtcdManifest) {
		t.Fatal("step-down removed the etcd manifest")
	}
	if ok, state := h.runningReady(t, h.mirror(t, c, "etcd"), actuator.EtcdManifest); !ok {
		t.Fatalf("the etcd mirror pod after step-down: %s", state)
	}
	if pid, err := h.n.ContainerPID(ctx, metav1.NamespaceSystem, "etcd-"+node, "etcd"); err != nil || pid != etcdPID {
		t.Fatalf("etcd after step-down: pid %d (%v), want the same process %d", pid, err, etcdPID)
	}
	if voters, _, got := etcdwatch.MembersOf(t, cli); got != clusterID || !slices.Equal(voters, []string{voter, node}) {
		t.Fatalf("after step-down: cluster %x voters %v, want %s still voting", got, voters, node)
	}
	if role, err := h.cfg.State.Role(); err != nil || role != holdfastv1.RoleAgent {
		t.Fatalf("role file after step-down: %q %v", role, err)
	}

	// The controller removes the stepped-down member (etcd refuses a
	// reconfiguration until its members have been connected for 5 s).
	poll.Until(t, within, "the stepped-down member removed", func() (bool, string) {
		rctx, rcancel := context.WithTimeout(ctx, etcdCall)
		defer rcancel()
		_, err := cli.MemberRemove(rctx, id)
		return err == nil, fmt.Sprint(err)
	})
	if voters, learners, got := etcdwatch.MembersOf(t, cli); got != clusterID || !slices.Equal(voters, []string{voter}) || len(learners) > 0 {
		t.Fatalf("after the removal: cluster %x voters %q learners %q", got, voters, learners)
	}

	// Finish-demote: the pod stopped before its data is moved.
	st := h.cfg.State
	drive(t, "finish-demote", within, func() error { return h.act.FinishDemote(ctx) }, func(error) {
		if !exists(t, st.MemberDataDir) {
			t.Fatal("finish-demote moved the member data while the kubelet still runs its etcd pod")
		}
	})
	if h.manifestExists(t, actuator.EtcdManifest) || h.manifestExists(t, actuator.APIServerManifest) {
		t.Fatal("a manifest stays after finish-demote")
	}
	if p := h.mirror(t, c, "etcd"); p != nil {
		t.Fatalf("the etcd mirror pod stays after finish-demote: %s", p.Status.Phase)
	}
	if n := h.running(t, "etcd", "etcd"); n != 0 {
		t.Fatalf("%d etcd containers still run after finish-demote (its mirror pod is gone)", n)
	}
	if !exists(t, filepath.Join(st.MovedAside(), "member")) || exists(t, st.MemberDataDir) || exists(t, st.MovedAside()+".old") {
		t.Fatalf("the member data after finish-demote: want %s moved to %s, one copy", st.MemberDataDir, st.MovedAside())
	}
	for _, f := range []string{actuator.EtcdServerCert, actuator.EtcdServerKey, actuator.EtcdPeerCert, actuator.EtcdPeerKey,
		actuator.APIServerEtcdClientCert, actuator.APIServerEtcdClientKey} {
		if exists(t, filepath.Join(h.cfg.PKIDir, f)) {
			t.Errorf("the member's %s stays after finish-demote", f)
		}
	}
	if !exists(t, filepath.Join(h.cfg.PKIDir, actuator.EtcdCAKey)) {
		t.Error("finish-demote removed the etcd CA")
	}
	if j, err := st.Join(); err != nil || j != "" {
		t.Errorf("join target after finish-demote: %q %v", j, err)
	}
	if voters, learners, got := etcdwatch.MembersOf(t, cli); got != clusterID || !slices.Equal(voters, []string{voter}) || len(learners) > 0 {
		t.Fatalf("after finish-demote: cluster %x voters %q learners %q", got, voters, learners)
	}
	x.Check(t)
}

// readThroughMember writes a key through the cluster and waits to read it
// through the new member alone.
func readThroughMember(t *testing.T, ctx context.Context, c *cluster.Cluster, member string) {
	t.Helper()
	cli, err := c.EtcdClient(c.EtcdEndpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/holdfast-static-pod/written", "through "+voter); err != nil {
		t.Fatal(err)
	}
	own, err := c.EtcdClient(member)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	poll.Until(t, within, "the new member serving the cluster's data", func() (bool, string) {
		gctx, gcancel := context.WithTimeout(ctx, etcdCall)
		defer gcancel()
		r, err := own.Get(gctx, "/holdfast-static-pod/written")
		if err != nil || len(r.Kvs) != 1 {
			return false, fmt.Sprint(r, err)
		}
		return string(r.Kvs[0].Value) == "through "+voter, string(r.Kvs[0].Value)
	})
}

// servesTheCluster asks the node's kube-apiserver, as the administrator,
// for the cluster's Nodes and writes a ConfigMap through it that the hub's
// apiserver reads: one store, the member's.
func servesTheCluster(t *testing.T, ctx context.Context, c *cluster.Cluster, n *cluster.Node) {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = fmt.Sprintf("https://%s:%d", n.IP, cluster.NodeAPIServerPort)
	api, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := api.List(ctx, &nodes); err != nil {
		t.Fatalf("listing Nodes through the kubelet's kube-apiserver: %v", err)
	}
	var names []string
	for _, o := range nodes.Items {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{voter, node}) {
		t.Fatalf("the kubelet's kube-apiserver lists Nodes %v, want %s and %s", names, voter, node)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "written-through-" + n.Name},
		Data: map[string]string{"by": "the static pod kube-apiserver"}}
	if err := api.Create(ctx, cm); err != nil {
		t.Fatalf("writing through the kubelet's kube-apiserver: %v", err)
	}
	got := &corev1.ConfigMap{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil || got.Data["by"] != cm.Data["by"] {
		t.Fatalf("the hub's apiserver reads %v (%v), want what the static pod's wrote", got.Data, err)
	}
}

// logTails logs the end of the node's kubelet log and of its pods'
// container logs, for a failed run: the cluster and its files go with it.
func logTails(t *testing.T, n *cluster.Node) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.Dir, "var", "log", "pods", "*", "*", "*.log"))
	for _, f := range append([]string{filepath.Join(n.Dir, "logs", "kubelet.log")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Logf("%s: %v", f, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s, its last lines:\n%s", f, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdproc"
)

// TestTheNodePluginFollowsTheLiveMemberList: VoterPolicy's
// spec.etcd.endpoints names m1 and m2, the members as installed; two swaps
// replace both (m4, m5 in). The node plugin of m3's host keeps reading the
// member list: through the members its last answer named, and, restarted
// with no answer of its own, through status.clientURLs as the voter
// controller writes it. When m3 itself is removed, its tombstone is
// written through members the fixed list never named.
func TestTheNodePluginFollowsTheLiveMemberList(t *testing.T) {
	bin := filepath.Join(env.BinDir, "etcd")
	dir := t.TempDir()
	ms, err := etcdproc.NewMembers("m1", "m2", "m3", "m4", "m5")
	if err != nil {
		t.Fatal(err)
	}
	m1, m2, m3, m4, m5 := ms[0], ms[1], ms[2], ms[3], ms[4]
	cli, stops := startVoters(t, bin, dir, ms[:3], ms)
	ctx := t.Context()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, etcdCallTimeout) }

	vp := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(true),
			Etcd: holdfastv1.EtcdAccess{Endpoints: []string{m1.ClientURL, m2.ClientURL}}}}
	if err := env.Client.Create(ctx, vp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vp) })

	state := hoststate.State{Dir: filepath.Join(dir, "host-m3"), MemberDataDir: filepath.Join(dir, "host-m3-db")}
	etcd := &tombstone.ClientEtcd{LocalEndpoint: m3.ClientURL, Cluster: nodeplugin.PolicyEndpoints(env.Client)}
	w := &tombstone.Watcher{Etcd: etcd, State: state, Clock: clocktesting.NewFakeClock(metav1.Now().Time)}
	memberList := func(e *tombstone.ClientEtcd) func() (bool, error) {
		return func() (bool, error) {
			_, ids, err := e.Members(ctx)
			return err == nil && len(ids) == 3, fmt.Errorf("members %v: %v", ids, err)
		}
	}
	eventually(t, "m3 recorded by its host", func() (bool, error) {
		if _, err := w.Check(ctx); err != nil {
			return false, err
		}
		m, err := state.Member()
		return m != nil, err
	})
	eventually(t, "the member list read through spec.etcd.endpoints", memberList(etcd))

	// swap adds in as a learner, starts and promotes it, then removes out
	// and stops it, as a voter swap does.
	swap := func(out, in etcdproc.Member) {
		t.Helper()
		var added *clientv3.MemberAddResponse
		eventually(t, in.Name+" added as a learner", func() (bool, error) {
			c, cancel := call()
			defer cancel()
			var err error
			added, err = cli.MemberAddAsLearner(c, []string{in.PeerURL})
			return err == nil, err
		})
		var join []string
		for _, m := range added.Members {
			name := m.Name
			if m.ID == added.Member.ID {
				name = in.Name
			}
			join = append(join, name+"="+m.PeerURLs[0])
		}
		p, err := dbusdouble.StartExec(etcdproc.Command(bin, in, filepath.Join(dir, in.Name), strings.Join(join, ","), "existing"))
		if err != nil {
			t.Fatal(err)
		}
		stops[in.Name] = func() { _ = p.Stop() }
		t.Cleanup(stops[in.Name])
		eventually(t, in.Name+" promoted", func() (bool, error) {
			c, cancel := call()
			defer cancel()
			_, err := cli.MemberPromote(c, added.Member.ID)
			return err == nil, err
		})
		removeMember(t, cli, out)
		stops[out.Name]()
	}
	swap(m1, m4)
	// The plugin reads the member list between the swaps, as its watcher
	// does every few seconds while swaps take minutes.
	eventually(t, "the member list read after m1 was replaced", memberList(etcd))
	swap(m2, m5)
	eventually(t, "the member list read after m2 was replaced, through m4", memberList(etcd))

	// A plugin restarted now has read no member list, and every member the
	// spec names is gone: it reads through the controller's status.
	fresh := &tombstone.ClientEtcd{LocalEndpoint: m3.ClientURL, Cluster: nodeplugin.PolicyEndpoints(env.Client)}
	if peers, err := fresh.VoterPeerURLs(ctx); err == nil {
		t.Fatalf("the spec's removed members answered the member list: %v", peers)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vp), vp); err != nil {
		t.Fatal(err)
	}
	vp.Status.ClientURLs = []string{m3.ClientURL, m4.ClientURL, m5.ClientURL}
	if err := env.Client.Status().Update(ctx, vp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the voters' peer URLs read through status.clientURLs", func() (bool, error) {
		peers, err := fresh.VoterPeerURLs(ctx)
		slices.Sort(peers)
		want := []string{m3.PeerURL, m4.PeerURL, m5.PeerURL}
		slices.Sort(want)
		return err == nil && slices.Equal(peers, want), fmt.Errorf("peers %v, want %v: %v", peers, want, err)
	})
	eventually(t, "the member list read through status.clientURLs", memberList(fresh))

	// m3 itself removed: its host writes the tombstone.
	recorded, err := state.Member()
	if err != nil || recorded == nil {
		t.Fatalf("recorded member %v: %v", recorded, err)
	}
	removeMember(t, cli, m3)
	eventually(t, "m3's tombstone written", func() (bool, error) { return w.Check(ctx) })
	ts, err := state.Tombstone()
	if err != nil || ts == nil || ts.MemberID != recorded.ID || ts.ClusterID != recorded.ClusterID {
		t.Fatalf("tombstone %+v (%v), want member %s of cluster %s", ts, err, recorded.ID, recorded.ClusterID)
	}
}

// removeMember removes m by its name, retried while etcd refuses
// ("unhealthy cluster" for a while after a member joined).
func removeMember(t *testing.T, cli *clientv3.Client, m etcdproc.Member) {
	t.Helper()
	eventually(t, m.Name+" removed", func() (bool, error) {
		c, cancel := context.WithTimeout(t.Context(), etcdCallTimeout)
		defer cancel()
		ml, err := cli.MemberList(c)
		if err != nil {
			return false, err
		}
		for _, mem := range ml.Members {
			if mem.Name == m.Name || slices.Contains(mem.PeerURLs, m.PeerURL) {
				_, err := cli.MemberRemove(c, mem.ID)
				return false, err
			}
		}
		return true, nil
	})
}

//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
)

// TestTheNodePluginFollowsTheVoterPolicysHostSettings: the member data
// directory holdfast-node moves aside and guards comes from the VoterPolicy
// when no flag names it. Installed before the policy's edit (or before the
// policy), the plugin would go on with the old directory: it exits instead,
// naming the change, so its container starts again with the new one.
func TestTheNodePluginFollowsTheVoterPolicysHostSettings(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	bus := agentHost(t, dir)
	createNode(t, "w-policy")
	ctx := context.Background()
	local := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	vp := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, DryRun: new(true),
			Etcd: holdfastv1.EtcdAccess{Endpoints: []string{local}},
			Host: holdfastv1.HostRoleSettings{MemberDataDir: filepath.Join(dir, "db1")}}}
	if err := env.Client.Create(ctx, vp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vp) })

	exited := startRun(t, nodeplugin.Options{NodeName: "w-policy", VoterSwaps: true,
		HostDir: filepath.Join(dir, "holdfast"), SystemdDir: filepath.Join(dir, "systemd"),
		ServerUnit: serverUnit, AgentUnit: agentUnit, EtcdLocal: local, CRIEndpoint: r.host.Endpoint,
		SystemdBus: bus.Address, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		PolicyEvery: 100 * time.Millisecond})
	waitFor(t, "the plugin's reports on the Node", func() bool {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "w-policy"}, n); err != nil {
			return false
		}
		return n.Annotations[holdfastv1.AnnotationProvisioned] == "true"
	})
	if stopped, err := exited(); stopped {
		t.Fatalf("holdfast-node exited with the policy unchanged: %v", err)
	}

	if err := env.Client.Get(ctx, client.ObjectKey{Name: holdfastv1.VoterPolicyName}, vp); err != nil {
		t.Fatal(err)
	}
	vp.Spec.Host.MemberDataDir = filepath.Join(dir, "db2")
	if err := env.Client.Update(ctx, vp); err != nil {
		t.Fatal(err)
	}
	var runErr error
	waitFor(t, "holdfast-node to exit on the changed member data directory", func() bool {
		stopped, err := exited()
		runErr = err
		return stopped
	})
	if runErr == nil || !strings.Contains(runErr.Error(), filepath.Join(dir, "db2")) || !strings.Contains(runErr.Error(), filepath.Join(dir, "db1")) {
		t.Fatalf("Run returned %v, want an error naming the old and the new member data directory", runErr)
	}
}

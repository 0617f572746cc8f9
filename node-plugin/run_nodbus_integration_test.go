//go:build integration

package nodeplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestRunWithoutDBusReportsAndRetriesInsteadOfExiting starts holdfast-node
// as its main does, with voter swaps and no VoterPolicy, on hosts where its
// actuator cannot act yet, and sees it keep running (its fence agent with
// it) and say why on the Node, instead of exiting into a crash loop:
//   - the chart's Systemd and no D-Bus socket (systemd not up yet, or a
//     kubeadm host installed with the wrong node.actuator): the host is
//     reported not provisioned and a promote refused naming the cause and
//     the remedy; once the bus answers, the start condition is installed,
//     the host reported provisioned and the same promote carried out, then
//     held running by Run's etcd client: no member answers at the local
//     endpoint, so it has not joined;
//   - the chart's StaticPod (a kubeadm host before its VoterPolicy exists):
//     it runs the StaticPod actuator, not the Systemd one it has no D-Bus
//     for, and reports not provisioned until the policy names the etcd
//     image.
func TestRunWithoutDBusReportsAndRetriesInsteadOfExiting(t *testing.T) {
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: holdfastv1.VoterPolicyName}, &holdfastv1.VoterPolicy{}); !apierrors.IsNotFound(err) {
		t.Fatalf("this test needs no VoterPolicy %s: %v", holdfastv1.VoterPolicyName, err)
	}
	r := newRig(t)
	start := func(t *testing.T, node, act, dir string) func() (bool, error) {
		createNode(t, node)
		return startRun(t, nodeplugin.Options{NodeName: node, VoterSwaps: true, Actuator: act,
			HostDir: filepath.Join(dir, "holdfast"), SystemdDir: filepath.Join(dir, "bus", "systemd"),
			MemberDataDir: filepath.Join(dir, "db"), ServerUnit: serverUnit, AgentUnit: agentUnit,
			EtcdLocal: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), CRIEndpoint: r.host.Endpoint,
			SystemdBus: "unix:path=" + filepath.Join(dir, "bus", "bus.sock"), MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
			ReportEvery: 200 * time.Millisecond, FitnessEvery: time.Hour})
	}
	provisioned := func(t *testing.T, node, want string, exited func() (bool, error)) {
		waitFor(t, node+" reported provisioned "+want, func() bool {
			if stopped, err := exited(); stopped {
				t.Fatalf("Run stopped: %v", err)
			}
			n := &corev1.Node{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
				return false
			}
			return n.Annotations[holdfastv1.AnnotationProvisioned] == want
		})
	}

	t.Run("Systemd without D-Bus", func(t *testing.T) {
		const node, swap = "nobus-1", "20260301T120000Z-a-nobus-1"
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "bus"), 0o755); err != nil {
			t.Fatal(err)
		}
		exited := start(t, node, holdfastv1.ActuatorSystemd, dir)
		provisioned(t, node, "false", exited)
		holdLease(t, swap)
		setStep(t, node, holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote, node+"=http://127.0.0.1:2380")
		rep := waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRefused)
		for _, want := range []string{"no systemd to switch the host's role with", "bus.sock", "node.dbusSocket", "node.actuator to StaticPod", "no VoterPolicy default exists"} {
			if !strings.Contains(rep.Message, want) {
				t.Errorf("the refusal %q does not say %q", rep.Message, want)
			}
		}
		agentHost(t, filepath.Join(dir, "bus"))
		provisioned(t, node, "true", exited)
		if _, err := os.Stat(filepath.Join(dir, "bus", "systemd", serverUnit+".d", actuator.StartDropIn)); err != nil {
			t.Fatalf("the server's start condition is not installed once systemd answers: %v", err)
		}
		// The refusal stands until the reconciler looks again (the Node's
		// provisioned report wakes it): then the promote is carried out, and
		// waits on the etcd client Run gives the actuator for the member to
		// join (none answers here).
		poll.Until(t, waitTimeout, "the refused promote carried out once systemd answers, waiting for its member", func() (bool, string) {
			n := &corev1.Node{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
				return false, err.Error()
			}
			rep, err := holdfastv1.ParseActuatorReport(n.Annotations[holdfastv1.AnnotationActuator])
			if err != nil || rep == nil {
				return false, fmt.Sprint(err)
			}
			if rep.Phase == holdfastv1.ActuatorDone {
				t.Fatalf("the promote is done with no etcd member answering: %+v", rep)
			}
			return rep.Step == holdfastv1.RoleStepPromote && rep.Phase == holdfastv1.ActuatorRunning && rep.StartedAt != nil &&
				strings.Contains(rep.Message, "waiting: the local etcd member does not answer"), rep.Phase + ": " + rep.Message
		})
		if _, err := os.Stat(filepath.Join(dir, "bus", "systemd", serverUnit+".d", actuator.JoinDropIn)); err != nil {
			t.Fatalf("the promote did not write the join drop-in: %v", err)
		}
	})

	t.Run("the chart's StaticPod before the policy", func(t *testing.T) {
		const node, swap = "nobus-2", "20260301T120000Z-a-nobus-2"
		exited := start(t, node, holdfastv1.ActuatorStaticPod, t.TempDir())
		provisioned(t, node, "false", exited)
		holdLease(t, swap)
		setStep(t, node, holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote, node+"=http://127.0.0.1:2380")
		if rep := waitReport(t, node, holdfastv1.RoleStepPromote, holdfastv1.ActuatorRefused); !strings.Contains(rep.Message, "no etcd image") {
			t.Fatalf("the refusal %q does not say the policy's etcd image is missing", rep.Message)
		}
	})
}

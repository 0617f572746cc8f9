//go:build integration

package nodeplugin_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/node-plugin/tombstone"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdproc"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestPromoteOfAServerOfAnotherClusterIsNeverDone: the server unit a
// promote starts runs a real etcd on the member's ports and under the
// node's name that bootstraps a cluster of its own, ignoring the join
// drop-in, as a server started from a former cluster's data does (etcd
// ignores the join flags then). The unit is active and the member answers,
// yet the promote stays running, saying the member is of another cluster
// than the one it was told to join; once its bound from the server's start
// has passed it fails saying so, and it is never reported done.
func TestPromoteOfAServerOfAnotherClusterIsNeverDone(t *testing.T) {
	bin := filepath.Join(env.BinDir, "etcd")
	voters, standby, cli, id := threeVotersAndAStandby(t, bin, "j1", "j2", "j3", "j4")
	clusterID := tombstone.FormatID(id)
	ctx := t.Context()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, etcdCallTimeout) }

	const node, swap = "j4", "20260301T120000Z-j1-j4"
	createNode(t, node)
	// The actuator's clock: the bound passes when the test says.
	clk := clocktesting.NewFakeClock(time.Now())
	p := startPlugin(t, node, func(state hoststate.State, cond func(string) []string) []dbusdouble.Unit {
		return []dbusdouble.Unit{
			{Name: serverUnit, ExecCondition: cond(holdfastv1.RoleServer), RestartAlways: true, RestartSec: 200 * time.Millisecond,
				Start: func(_ context.Context, env map[string]string) (dbusdouble.Process, error) {
					if env[actuator.EnvJoin] == "" {
						return nil, errors.New("started without the join drop-in")
					}
					return dbusdouble.StartExec(etcdproc.Command(bin, standby, state.MemberDataDir,
						etcdproc.InitialCluster(standby), "new"))
				}},
			{Name: agentUnit, ExecCondition: cond(holdfastv1.RoleAgent), Enabled: true, Active: true},
		}
	}, &tombstone.ClientEtcd{LocalEndpoint: standby.ClientURL,
		Cluster: func(context.Context) ([]string, error) {
			return []string{voters[0].ClientURL, voters[1].ClientURL, voters[2].ClientURL}, nil
		}}, func(c *actuator.Config) { c.Clock = clk })

	// The controller's part: the learner added, the Lease held, the step set.
	holdLease(t, swap)
	_, join := addLearner(t, cli, standby)
	steps := stepCounts(t)
	setStep(t, node, holdfastv1.RoleServer, swap, holdfastv1.RoleStepPromote, join)

	notOfTheCluster := fmt.Sprintf(", not of cluster %s it was told to join", clusterID)
	rep := waitPromote(t, node, holdfastv1.ActuatorRunning, "waiting: the local etcd member ", notOfTheCluster)
	if rep.StartedAt == nil {
		t.Fatalf("a waiting promote reports no server start: %+v", rep)
	}
	if s := p.mgr.ActiveState(serverUnit); s != "active" {
		t.Fatalf("server unit %s while the promote waits, want active", s)
	}
	// What the server runs is a member of another cluster indeed.
	own, err := etcdproc.Client(standby)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	cctx, ccancel := call()
	defer ccancel()
	if st, err := own.Status(cctx, standby.ClientURL); err != nil || tombstone.FormatID(st.Header.ClusterId) == clusterID {
		t.Fatalf("the server's etcd: %v, %v; want a member of a cluster other than %s", st, err, clusterID)
	}

	// Past the bound from the server's start the step fails with the
	// member's state (and is retried with backoff).
	clk.Step(actuator.DefaultJoinTimeout)
	waitPromote(t, node, holdfastv1.ActuatorFailed, notOfTheCluster, "after the server unit started")
	if got := rose(steps, stepCounts(t)); got[holdfastv1.RoleStepPromote+"/done"] != 0 {
		t.Fatalf("the promote of a member of another cluster was counted done: %v", got)
	}
}

// waitPromote waits for the promote report of node to be in phase with a
// message saying all of want; a done report fails the test at once.
func waitPromote(t *testing.T, node, phase string, want ...string) *holdfastv1.ActuatorReport {
	t.Helper()
	var found *holdfastv1.ActuatorReport
	poll.Until(t, waitTimeout, fmt.Sprintf("%s: promote %s saying %q", node, phase, want), func() (bool, string) {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			return false, err.Error()
		}
		rep, err := holdfastv1.ParseActuatorReport(n.Annotations[holdfastv1.AnnotationActuator])
		if err != nil || rep == nil {
			return false, fmt.Sprint(err)
		}
		if rep.Step == holdfastv1.RoleStepPromote && rep.Phase == holdfastv1.ActuatorDone {
			t.Fatalf("%s: promote reported done: %+v", node, rep)
		}
		if rep.Step != holdfastv1.RoleStepPromote || rep.Phase != phase {
			return false, rep.Phase + ": " + rep.Message
		}
		for _, w := range want {
			if !strings.Contains(rep.Message, w) {
				return false, rep.Phase + ": " + rep.Message
			}
		}
		found = rep
		return true, ""
	})
	return found
}

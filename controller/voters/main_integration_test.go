//go:build integration

package voters_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/test/webhooktest"
	"github.com/holdfast-io/holdfast/webhook"
)

// The real control plane and the real admission webhook, shared by every
// integration test of the voter controller: the controller acts as
// holdfast-controller's service account and the node plugins as
// holdfast-node's, so every write the swap makes passes the rules a cluster
// would apply to it (role labels only after the member is gone, the Lease's
// holder, a node plugin's own Node only).
var (
	env     *testenv.Env
	shifted = &shiftClock{}
)

const (
	controllerUser = "system:serviceaccount:holdfast-system:holdfast-controller"
	nodePluginUser = "system:serviceaccount:holdfast-system:holdfast-node"
	schedulerUser  = "system:serviceaccount:holdfast-system:holdfast-scheduler"
	releaseNS      = "holdfast-system"
)

// shiftClock is the real clock plus an offset a test moves forward to pass
// a deadline (learner stall + operation timeout) without waiting for it.
// The controller and the webhook read it; the node plugins read the real
// clock, so a Lease the controller renews stays unexpired for them.
type shiftClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *shiftClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}
func (c *shiftClock) Since(t time.Time) time.Duration {
	return c.Now().Sub(t)
}
func (c *shiftClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.offset += d }

// Reset puts the clock back on the real time, for a test whose controller
// is a real process reading the real clock: the webhook must judge that
// process's status stamps on the same clock.
func (c *shiftClock) Reset() { c.mu.Lock(); defer c.mu.Unlock(); c.offset = 0 }

// TestMain also lets the test binary stand in for `holdfast-node role-is` in
// the server and agent units' ExecCondition (the function the real binary
// runs).
func TestMain(m *testing.M) {
	if os.Getenv("HOLDFAST_TEST_ROLE_IS") == "1" {
		os.Exit(hoststate.RoleIsMain(os.Args[2:], os.Stderr))
	}
	os.Setenv("HOLDFAST_TEST_ROLE_IS", "1")
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "voters suite: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	log.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	if err != nil {
		return 1, err
	}
	e, err := testenv.Start(testenv.Options{Webhooks: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(root, "webhook", "config", "validating-webhook-configuration.yaml")},
	}})
	if err != nil {
		return 1, err
	}
	env = e
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
		if err := e.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "voters suite: stopping the control plane: %v\n", err)
		}
	}()
	if stop, err = startWebhook(); err != nil {
		return 1, err
	}
	if err := grantRBAC(); err != nil {
		return 1, err
	}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

func startWebhook() (func(), error) {
	opts := webhook.DefaultOptions()
	opts.Now = shifted.Now
	opts.Audit = discard{}
	return webhooktest.StartWebhook(env, &opts)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// grantRBAC lets holdfast's accounts do everything RBAC allows, so every
// refusal a test sees is the webhook's.
func grantRBAC() error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-voters-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: nodePluginUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: schedulerUser},
		},
	}
	return env.Client.Create(context.Background(), crb)
}

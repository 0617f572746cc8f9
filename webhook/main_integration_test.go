//go:build integration

package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/holdfast-io/holdfast/test/testenv"
	"github.com/holdfast-io/holdfast/test/webhooktest"
	"github.com/holdfast-io/holdfast/webhook"
)

// The suite's clock: Lease expiry is judged against it, so refusals that
// name a time are the same on every run.
var epoch0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// syncBuffer collects audit lines written from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }

var (
	env      *testenv.Env
	clock    = &testClock{now: epoch0}
	auditOut = &syncBuffer{}
	opts     webhook.Options
	// stopServer stops the running webhook server and waits for it.
	stopServer func()

	updateGolden = flag.Bool("update", false, "rewrite testdata/refusals from kubectl's real output")
)

const (
	controllerUser = "system:serviceaccount:holdfast-system:holdfast-controller"
	votersUser     = "system:serviceaccount:holdfast-system:holdfast-controller-voters"
	nodePluginUser = "system:serviceaccount:holdfast-system:holdfast-node"
	schedulerUser  = "system:serviceaccount:holdfast-system:holdfast-scheduler"
	operatorGroup  = "plant-operators"
	shiftLeadGroup = "shift-leads"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "webhook suite: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	// The server's request logs are not what the tests read.
	log.SetLogger(logr.Discard())
	e, err := testenv.Start(testenv.Options{Webhooks: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join("config", "validating-webhook-configuration.yaml")},
	}})
	if err != nil {
		return 1, err
	}
	env = e
	defer func() {
		if stopServer != nil {
			stopServer()
		}
		if err := e.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "webhook suite: stopping the control plane: %v\n", err)
		}
	}()

	opts = webhook.DefaultOptions()
	opts.Audit = auditOut
	// The chart's split: the units role and the voters role each under
	// their own account.
	opts.Voters = votersUser
	opts.Now = clock.Now
	// Shift leads may confirm a fence and ask for a failover besides admins;
	// nobody but admins may ask for a swap.
	opts.ConfirmFencedGroups = []string{webhook.ClusterAdminGroup, shiftLeadGroup}
	opts.FailoverGroups = []string{webhook.ClusterAdminGroup, shiftLeadGroup}
	if err := startServer(); err != nil {
		return 1, err
	}
	if err := grantRBAC(); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// startServer runs the real webhook server where envtest pointed the
// apiserver, and waits until it answers.
func startServer() error {
	stop, err := webhooktest.StartWebhook(env, &opts)
	if err != nil {
		return err
	}
	stopServer = func() { stop(); stopServer = nil }
	return nil
}

// grantRBAC lets holdfast's accounts and the test's people do everything
// RBAC can allow, so every refusal the tests see is the webhook's.
func grantRBAC() error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "holdfast-webhook-test-everyone"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: controllerUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: votersUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: nodePluginUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: schedulerUser},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: operatorGroup},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: shiftLeadGroup},
		},
	}
	return env.Client.Create(context.Background(), crb)
}

// refusal asserts kubectl was refused with every wanted phrase and keeps
// kubectl's exact output as the rule's example (testdata/refusals), which
// webhook/README.md quotes.
func refusal(t *testing.T, example string, res testenv.Result, want ...string) {
	t.Helper()
	if res.ExitCode == 0 {
		t.Fatalf("the change was allowed; want a refusal:\n%s", res)
	}
	for _, w := range want {
		if !strings.Contains(res.Stderr, w) {
			t.Errorf("kubectl's error does not say %q:\n%s", w, res.Stderr)
		}
	}
	if example == "" {
		return
	}
	path := filepath.Join("testdata", "refusals", example+".txt")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(res.Stderr), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	golden, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no example %s: run go test -tags integration ./webhook -update", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(golden) != res.Stderr {
		t.Errorf("kubectl now prints, for example %s:\n%s\nwhere the example (and the README) says:\n%s\nrun with -update and refresh webhook/README.md",
			example, res.Stderr, golden)
	}
}

// allowed asserts kubectl succeeded.
func allowed(t *testing.T, res testenv.Result) {
	t.Helper()
	if res.ExitCode != 0 {
		t.Fatalf("the change was refused; want it allowed:\n%s", res)
	}
}

// kubectlAs runs the real kubectl as the admin impersonating a user.
func kubectlAs(t *testing.T, user string, args ...string) testenv.Result {
	t.Helper()
	return env.Kubectl().Run(t, "", append([]string{"--as=" + user}, args...)...)
}

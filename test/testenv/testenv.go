// Package testenv starts the real control plane for a test package: the
// kube-apiserver and etcd built from this module's graph (make k8s-bin),
// through controller-runtime's envtest, with holdfast's CRDs installed and
// established. It hands tests a client, a rest.Config, a kubeconfig file and
// the real kubectl.
//
// Use it once per package:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.Options{}) }
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// modulePath identifies the repository root's go.mod.
const modulePath = "github.com/holdfast-io/holdfast"

// Options adjust the control plane for a test package.
type Options struct {
	// Webhooks are registered with the apiserver, as envtest does.
	Webhooks envtest.WebhookInstallOptions
	// StartTimeout bounds the start of each control-plane process; a loaded
	// 2-core machine needs more than envtest's 20s default.
	StartTimeout time.Duration
	// APIServerFlags are extra kube-apiserver flags (name without dashes to
	// value), e.g. an audit policy and log for tests of what a component calls.
	APIServerFlags map[string]string
	// WithoutCRDs starts the control plane without holdfast's CRDs, for a
	// test that installs them the way a chart does.
	WithoutCRDs bool
}

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as an administrator (system:masters).
	Config *rest.Config
	// Client is a controller-runtime client with holdfast's kinds registered.
	Client client.Client
	// Scheme holds the built-in and holdfast kinds.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of an administrator kubeconfig file.
	Kubeconfig string
	// BinDir holds kube-apiserver, etcd and kubectl.
	BinDir string
	// CRDDir is the one copy of the CRDs, which the chart ships too.
	CRDDir string
	// Webhooks is the webhook install state (local serving host, port, certs).
	Webhooks *envtest.WebhookInstallOptions

	env     *envtest.Environment
	workDir string
}

// Main starts the control plane, stores it in *env, runs the package's tests
// and stops it. A control plane that cannot start fails the package with the
// reason; it is never skipped.
func Main(m *testing.M, env **Env, opts Options) {
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Start starts etcd and the kube-apiserver, installs the CRDs and waits for
// them to be established.
func Start(opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir, err := binaryDir(root)
	if err != nil {
		return nil, err
	}
	crdDir := filepath.Join(root, "charts", "holdfast", "files", "crds")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := holdfastv1.AddToScheme(scheme); err != nil {
		return nil, err
	}

	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	crdPaths := []string{crdDir}
	if opts.WithoutCRDs {
		crdPaths = nil
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		CRDDirectoryPaths:        crdPaths,
		ErrorIfCRDPathMissing:    !opts.WithoutCRDs,
		Scheme:                   scheme,
		WebhookInstallOptions:    opts.Webhooks,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  60 * time.Second,
	}
	for k, v := range opts.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", binDir, err)
	}
	e := &Env{
		Config:   cfg,
		Scheme:   scheme,
		BinDir:   binDir,
		CRDDir:   crdDir,
		Webhooks: &env.WebhookInstallOptions,
		env:      env,
	}
	if err := e.finishStart(!opts.WithoutCRDs); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) finishStart(crds bool) error {
	var err error
	e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return err
	}
	e.workDir, err = os.MkdirTemp("", "holdfast-testenv-")
	if err != nil {
		return err
	}
	_, e.Kubeconfig, err = e.UserConfig("admin", "system:masters")
	if err != nil || !crds {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.waitForCRDsEstablished(ctx)
}

// Stop stops the apiserver before etcd (an apiserver whose etcd is gone may
// ignore SIGTERM) and removes the work directory.
func (e *Env) Stop() error {
	err := e.env.Stop()
	if e.workDir != "" {
		err = errors.Join(err, os.RemoveAll(e.workDir))
	}
	return err
}

// waitForCRDsEstablished waits until every CRD in CRDDir reports Established.
func (e *Env) waitForCRDsEstablished(ctx context.Context) error {
	read := envtest.CRDInstallOptions{Paths: []string{e.CRDDir}, ErrorIfPathMissing: true}
	if err := envtest.ReadCRDFiles(&read); err != nil {
		return err
	}
	want := read.CRDs
	if len(want) == 0 {
		return fmt.Errorf("no CRDs in %s: run make generate", e.CRDDir)
	}
	for _, crd := range want {
		for {
			var got apiextensionsv1.CustomResourceDefinition
			err := e.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, &got)
			if err == nil && crdEstablished(&got) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not established: %w (last error: %v)", crd.Name, ctx.Err(), err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// UserConfig adds an apiserver user in the given groups and returns its
// rest.Config and kubeconfig path, for tests of who may do what.
func (e *Env) UserConfig(name string, groups ...string) (*rest.Config, string, error) {
	user, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, "", fmt.Errorf("adding user %s: %w", name, err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(e.workDir, "kubeconfig-"+strings.NewReplacer(":", "-", "/", "-").Replace(name))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, "", err
	}
	return user.Config(), path, nil
}

// As is a rest.Config impersonating user (with extra values, as a
// pod-bound service account token carries its node name).
func (e *Env) As(user string, extra map[string][]string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: extra}
	return cfg
}

// ClientAs is a client impersonating user, for tests of what the webhook
// and RBAC let each account do.
func (e *Env) ClientAs(t testing.TB, user string, extra map[string][]string) client.Client {
	t.Helper()
	c, err := client.New(e.As(user, extra), client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace for one test and deletes it afterwards.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hf-test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a test namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// Kubectl runs the real kubectl as the administrator.
func (e *Env) Kubectl() *Kubectl {
	return &Kubectl{Path: filepath.Join(e.BinDir, "kubectl"), Kubeconfig: e.Kubeconfig}
}

// KubectlAs runs the real kubectl as the named user in the given groups.
func (e *Env) KubectlAs(name string, groups ...string) (*Kubectl, error) {
	_, path, err := e.UserConfig(name, groups...)
	if err != nil {
		return nil, err
	}
	return &Kubectl{Path: filepath.Join(e.BinDir, "kubectl"), Kubeconfig: path}, nil
}

// Kubectl runs one kubectl binary against one kubeconfig.
type Kubectl struct {
	Path       string
	Kubeconfig string
}

// Result is what a kubectl run printed and how it exited.
type Result struct {
	Args     []string
	Stdout   string
	Stderr   string
	ExitCode int
}

// String describes the run for test failure messages.
func (r Result) String() string {
	return fmt.Sprintf("kubectl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.ExitCode, r.Stdout, r.Stderr)
}

// Run runs kubectl with stdin (may be empty) and the arguments. It fails the
// test only when kubectl could not be run at all; a non-zero exit is in the
// Result for the test to judge.
func (k *Kubectl) Run(t testing.TB, stdin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Path, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	default:
		t.Fatalf("running %s: %v", k.Path, err)
	}
	return res
}

// MustRun runs kubectl and fails the test unless it exits 0.
func (k *Kubectl) MustRun(t testing.TB, stdin string, args ...string) Result {
	t.Helper()
	res := k.Run(t, stdin, args...)
	if res.ExitCode != 0 {
		t.Fatalf("%s", res)
	}
	return res
}

// RepoRoot finds the repository root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// binaryDir is KUBEBUILDER_ASSETS when set, else bin/k8s/<version>, and must
// hold all three binaries.
func binaryDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		version, err := KubernetesVersion(root)
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "k8s", version)
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s is missing from %s: run make k8s-bin", name, dir)
		}
	}
	return dir, nil
}

// KubernetesVersion is the k8s.io/kubernetes version go.mod requires.
func KubernetesVersion(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" && strings.HasPrefix(fields[1], "v") {
			return fields[1], nil
		}
	}
	return "", errors.New("go.mod requires no k8s.io/kubernetes version")
}

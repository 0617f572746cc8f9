// Package crihost runs a real containerd 2.x with runc for tests, with
// private root, state, socket and runc root directories, and builds
// single-layer images without a registry. The binaries come from
// hack/build-cri-bin.sh (make cri-bin) under bin/cri/current; the settings
// are the ones these machines need (../../shared notes: restrict_oom_score_adj,
// netns mounts under the state dir, host-network sandboxes with no
// hostname). It needs root.
//
//	h, err := crihost.Start(dir)
//	defer h.Stop()
//	rt, err := h.RuntimeService(ctx)
package crihost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/holdfast-io/holdfast/test/proc"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// PauseImage is the sandbox image every Host pins.
const PauseImage = "holdfast.test/pause:1"

// BinDir is the directory holding containerd, containerd-shim-runc-v2, ctr
// and runc: $HOLDFAST_CRI_BIN, else bin/cri/current in the repository.
func BinDir() (string, error) {
	if d := os.Getenv("HOLDFAST_CRI_BIN"); d != "" {
		return d, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "cri", "current")
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing: run make cri-bin: %w", b, err)
		}
	}
	return dir, nil
}

// configTemplate is containerd's config for one Config.
const configTemplate = `version = 3
root = "{{dir}}/root"
state = "{{dir}}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{{dir}}/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[debug]
  level = "warn"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{{cnibin}}"]
    conf_dir = "{{cniconf}}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{{bin}}/runc"
        Root = "{{dir}}/runc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{{pause}}"
{{registry}}
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
`

// Config is one containerd: where it keeps its files and what it runs.
// Host and the e2e cluster's nodes (test/cluster) start theirs from it.
type Config struct {
	// Dir holds its root, state, runc root, sockets and config.toml.
	Dir string
	// Bin holds containerd, containerd-shim-runc-v2 and runc (BinDir).
	Bin string
	// CNIBin and CNIConf are the CNI plugins' and networks' directories.
	CNIBin, CNIConf string
	// Pause is the pinned sandbox image.
	Pause string
	// RegistryHosts, when set, is the registry config_path (certs.d).
	RegistryHosts string
}

// Socket is containerd's gRPC socket.
func (c Config) Socket() string { return filepath.Join(c.Dir, "containerd.sock") }

// Endpoint is the CRI endpoint, unix://<Socket>.
func (c Config) Endpoint() string { return "unix://" + c.Socket() }

// Prepare makes c's directories and writes its config.toml; it returns
// containerd's command line and the environment it runs in (its shim and
// runc on PATH). The caller starts it: directly, or inside a node's
// namespaces.
func (c Config) Prepare() (argv, env []string, err error) {
	for _, d := range []string{c.Dir, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), filepath.Join(c.Dir, "runc"), c.CNIBin, c.CNIConf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
	}
	registry := ""
	if c.RegistryHosts != "" {
		if err := os.MkdirAll(c.RegistryHosts, 0o755); err != nil {
			return nil, nil, err
		}
		registry = "  [plugins.'io.containerd.cri.v1.images'.registry]\n    config_path = \"" + c.RegistryHosts + "\"\n"
	}
	conf := strings.NewReplacer("{{dir}}", c.Dir, "{{bin}}", c.Bin, "{{cnibin}}", c.CNIBin, "{{cniconf}}", c.CNIConf,
		"{{pause}}", c.Pause, "{{registry}}\n", registry).Replace(configTemplate)
	path := filepath.Join(c.Dir, "config.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, nil, err
	}
	return []string{filepath.Join(c.Bin, "containerd"), "--config", path},
		append(os.Environ(), "PATH="+c.Bin+":"+os.Getenv("PATH")), nil
}

// WaitCRI waits, up to timeout, until the CRI service at endpoint answers
// Version, and returns a client of it. exited says why containerd is no
// longer running (nil while it runs): then it stops waiting.
func WaitCRI(ctx context.Context, endpoint string, timeout time.Duration, exited func() error) (internalapi.RuntimeService, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		rt, err := remote.NewRemoteRuntimeService(ctx, endpoint, 5*time.Second, noop.NewTracerProvider(), false)
		if err == nil {
			if _, err = rt.Version(ctx, "v1"); err == nil {
				return rt, nil
			}
			_ = rt.Close(ctx)
		}
		if xerr := exited(); xerr != nil {
			return nil, xerr
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("containerd CRI did not answer within %s: %v", timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Host is a running containerd.
type Host struct {
	// Dir holds every file of this containerd.
	Dir string
	// Endpoint is the CRI endpoint, unix://.../containerd.sock.
	Endpoint string
	BinDir   string
	cmd      *exec.Cmd
	done     chan struct{}
	rt       internalapi.RuntimeService
}

// Start starts containerd with everything under dir and waits for its CRI
// service to answer.
func Start(dir string) (*Host, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cfg := Config{Dir: dir, Bin: bin, CNIBin: filepath.Join(dir, "cni", "bin"), CNIConf: filepath.Join(dir, "cni", "conf"),
		Pause: PauseImage, RegistryHosts: filepath.Join(dir, "certs.d")}
	argv, env, err := cfg.Prepare()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "containerd.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &Host{Dir: dir, Endpoint: cfg.Endpoint(), BinDir: bin, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(h.done) }()
	rt, err := WaitCRI(context.Background(), h.Endpoint, 60*time.Second, func() error {
		select {
		case <-h.done:
			return errors.New("containerd exited")
		default:
			return nil
		}
	})
	if err != nil {
		h.Stop()
		return nil, fmt.Errorf("%w; see %s", err, logPath)
	}
	h.rt = rt
	if err := h.importPause(); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

// RuntimeService connects a CRI runtime client.
func (h *Host) RuntimeService(ctx context.Context) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, h.Endpoint, 10*time.Second, noop.NewTracerProvider(), false)
}

// ImageService connects a CRI image client.
func (h *Host) ImageService(ctx context.Context) (internalapi.ImageManagerService, error) {
	return remote.NewRemoteImageService(ctx, h.Endpoint, 10*time.Second, noop.NewTracerProvider(), false)
}

// Import imports an image tarball into the k8s.io namespace CRI uses.
func (h *Host) Import(tarball string) error {
	out, err := exec.Command(filepath.Join(h.BinDir, "ctr"), "--address", filepath.Join(h.Dir, "containerd.sock"),
		"--namespace", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", tarball, err, out)
	}
	return nil
}

// TrustPlainHTTP lets containerd pull from a registry on a loopback address
// over plain HTTP (a test registry).
func (h *Host) TrustPlainHTTP(hostPort string) error {
	dir := filepath.Join(h.Dir, "certs.d", hostPort)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	toml := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", hostPort, hostPort)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644)
}

func (h *Host) importPause() error {
	tar := filepath.Join(h.Dir, "pause.tar")
	if err := BuildTestImage(tar, PauseImage, []string{"pause"}); err != nil {
		return err
	}
	return h.Import(tar)
}

// Stop removes every pod sandbox (stopping its containers and shims) and
// stops containerd.
func (h *Host) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if h.rt != nil {
		if sbs, err := h.rt.ListPodSandbox(ctx, nil); err == nil {
			for _, sb := range sbs {
				_ = h.rt.StopPodSandbox(ctx, sb.Id)
				_ = h.rt.RemovePodSandbox(ctx, sb.Id)
			}
		}
		_ = h.rt.Close(ctx)
	}
	if h.cmd.Process != nil {
		proc.Stop(h.cmd.Process, h.done, 15*time.Second)
	}
}

// Pod is what a kubelet would ask of CRI for one pod: the test stands in
// for the kubelet and labels the sandbox as it does.
type Pod struct {
	Namespace, Name, UID string
	// Labels are the Pod's labels (the kubelet copies them to the sandbox).
	Labels map[string]string
	// Image and Args of the pod's one container.
	Image string
	Args  []string
}

// RunPod starts a host-network sandbox and one container for p and returns
// their IDs.
func RunPod(ctx context.Context, rt internalapi.RuntimeService, logDir string, p Pod) (sandboxID, containerID string, err error) {
	labels := map[string]string{
		"io.kubernetes.pod.name":      p.Name,
		"io.kubernetes.pod.namespace": p.Namespace,
		"io.kubernetes.pod.uid":       p.UID,
	}
	for k, v := range p.Labels {
		labels[k] = v
	}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID},
		Labels:       labels,
		LogDirectory: filepath.Join(logDir, p.UID),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	if err := os.MkdirAll(sbConfig.LogDirectory, 0o755); err != nil {
		return "", "", err
	}
	sandboxID, err = rt.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		return "", "", fmt.Errorf("run pod sandbox %s/%s: %w", p.Namespace, p.Name, err)
	}
	cConfig := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "runtime"},
		Image:    &runtimeapi.ImageSpec{Image: p.Image},
		Args:     p.Args,
		Labels: map[string]string{
			"io.kubernetes.pod.name": p.Name, "io.kubernetes.pod.namespace": p.Namespace,
			"io.kubernetes.pod.uid": p.UID, "io.kubernetes.container.name": "runtime",
		},
		LogPath: "runtime.log",
	}
	containerID, err = rt.CreateContainer(ctx, sandboxID, cConfig, sbConfig)
	if err != nil {
		return sandboxID, "", fmt.Errorf("create container in %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err := rt.StartContainer(ctx, containerID); err != nil {
		return sandboxID, containerID, fmt.Errorf("start container in %s/%s: %w", p.Namespace, p.Name, err)
	}
	return sandboxID, containerID, nil
}

// ContainerPID is the host PID of a running container's process.
func ContainerPID(ctx context.Context, rt internalapi.RuntimeService, id string) (int, error) {
	st, err := rt.ContainerStatus(ctx, id, true)
	if err != nil {
		return 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := jsonUnmarshal(st.Info["info"], &info); err != nil {
		return 0, err
	}
	if info.Pid == 0 {
		return 0, errors.New("container info has no pid")
	}
	return info.Pid, nil
}

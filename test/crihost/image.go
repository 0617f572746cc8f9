package crihost

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/holdfast-io/holdfast/test/testenv"
)

var (
	buildOnce sync.Once
	testBin   string
	buildErr  error
)

// TestImageBinary builds test/crihost/testimage as a static binary, once
// per process.
func TestImageBinary() (string, error) {
	buildOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "holdfast-testimage-")
		if err != nil {
			buildErr = err
			return
		}
		testBin = filepath.Join(dir, "testimage")
		cmd := exec.Command("go", "build", "-trimpath", "-o", testBin, "./test/crihost/testimage")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the test image binary: %v: %s", err, out)
		}
	})
	return testBin, buildErr
}

// Image is a single-layer image holding one static binary at /app with
// entrypoint [/app, entrypoint...].
func Image(binary string, entrypoint []string) (v1.Image, error) {
	return image(binary, "/app", append([]string{"/app"}, entrypoint...), nil)
}

// ImageAt is a single-layer image holding one static binary at path (an
// absolute path) with entrypoint as given (none: the pod's command names
// the binary) and PATH naming path's directory, as registry.k8s.io's etcd
// and kube-apiserver images keep theirs in /usr/local/bin for a pod's
// command to name it alone.
func ImageAt(binary, path string, entrypoint []string) (v1.Image, error) {
	return image(binary, path, entrypoint, []string{"PATH=" + filepath.Dir(path)})
}

func image(binary, path string, entrypoint, env []string) (v1.Image, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("image binary path %q: must be absolute", path)
	}
	data, err := singleFileTar(binary, strings.TrimPrefix(path, "/"))
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = env
	return mutate.ConfigFile(img, cfg)
}

// BuildTestImage writes the test binary as image ref to a tarball.
func BuildTestImage(path, ref string, entrypoint []string) error {
	bin, err := TestImageBinary()
	if err != nil {
		return err
	}
	return WriteImage(path, ref, bin, entrypoint)
}

// WriteImage writes binary as image ref to a tarball (Image).
func WriteImage(path, ref, binary string, entrypoint []string) error {
	img, err := Image(binary, entrypoint)
	if err != nil {
		return err
	}
	return writeTarball(path, ref, img)
}

// WriteImageAt writes binary at at as image ref to a tarball (ImageAt).
func WriteImageAt(path, ref, binary, at string, entrypoint []string) error {
	img, err := ImageAt(binary, at, entrypoint)
	if err != nil {
		return err
	}
	return writeTarball(path, ref, img)
}

func writeTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// singleFileTar is a tar stream with one executable file at name (a
// relative path) and the directories above it.
func singleFileTar(src, name string) ([]byte, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirs []string
	for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

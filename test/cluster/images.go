package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/holdfast-io/holdfast/test/crihost"
)

// PauseImage is the sandbox image every node pins: test/crihost's test
// binary in its pause mode.
const PauseImage = "holdfast.test/pause:e2e"

// Image is a locally built image: one static binary of this module at /app
// (test/crihost's single-layer images; no registry, the nodes import it),
// or one of make k8s-bin's at /usr/local/bin as in registry.k8s.io's image.
type Image struct {
	// Ref is the image reference pods name.
	Ref string
	// Package is the main package, relative to the repository root.
	Package string
	// K8sBinary, instead of Package, names a binary of make k8s-bin (etcd,
	// kube-apiserver: static, as built) for /usr/local/bin/<name>, on the
	// image's PATH, with no entrypoint: a pod's command names it, as a
	// kubeadm static pod's does.
	K8sBinary string
	// Entrypoint follows /app.
	Entrypoint []string
}

// buildBinary builds a main package of this module as a static binary.
func buildBinary(root, out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return nil
}

// buildImages builds the pause image and every image into dir (k8s holds
// make k8s-bin's binaries) and returns their tarballs.
func buildImages(root, dir, k8s string, images []Image) ([]string, error) {
	pause, err := crihost.TestImageBinary()
	if err != nil {
		return nil, err
	}
	out := []string{filepath.Join(dir, "pause.tar")}
	if err := crihost.WriteImage(out[0], PauseImage, pause, []string{"pause"}); err != nil {
		return nil, err
	}
	for _, im := range images {
		if im.K8sBinary != "" {
			tarPath := filepath.Join(dir, im.K8sBinary+".tar")
			if err := crihost.WriteImageAt(tarPath, im.Ref, filepath.Join(k8s, im.K8sBinary), "/usr/local/bin/"+im.K8sBinary, nil); err != nil {
				return nil, fmt.Errorf("image %s: %w", im.Ref, err)
			}
			out = append(out, tarPath)
			continue
		}
		base := filepath.Base(im.Package)
		bin := filepath.Join(dir, base)
		if err := buildBinary(root, bin, "./"+im.Package); err != nil {
			return nil, err
		}
		tarPath := filepath.Join(dir, base+".tar")
		if err := crihost.WriteImage(tarPath, im.Ref, bin, im.Entrypoint); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		out = append(out, tarPath)
	}
	return out, nil
}

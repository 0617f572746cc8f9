package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make images on a machine without a Docker engine fails and says why; it
// never passes silently having built nothing.
func TestImagesFailClearlyWithoutDocker(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct{ docker, want string }{
		{"/nonexistent/docker", "not found: make images needs a Docker engine"},
		{"false", "no Docker engine is reachable"},
	} {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "images.sh"))
		cmd.Env = append(cmd.Environ(), "DOCKER="+tc.docker)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("DOCKER=%s: hack/images.sh succeeded:\n%s", tc.docker, out)
		}
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "nothing was built") {
			t.Errorf("DOCKER=%s: output lacks %q:\n%s", tc.docker, tc.want, out)
		}
	}
}

// The Dockerfile builds a static binary as a non-root image.
func TestDockerfileIsStaticAndNonRoot(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{"CGO_ENABLED=0", "distroless/static", "USER 65532:65532", "go build -trimpath"} {
		if !strings.Contains(df, want) {
			t.Errorf("build/Dockerfile lacks %q", want)
		}
	}
}

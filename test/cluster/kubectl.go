package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// KubectlResult is what a kubectl run printed and its exit code.
type KubectlResult struct {
	Stdout, Stderr string
	Code           int
}

// Kubectl runs the real kubectl (bin/k8s) inside the hub with kubeconfig
// (the administrator's when empty). pluginDirs go first on its PATH, so
// `kubectl <plugin>` finds a kubectl-<plugin> binary there the way a
// person's kubectl does. A non-zero exit is a result, not an error.
func (c *Cluster) Kubectl(ctx context.Context, kubeconfig string, pluginDirs []string, args ...string) (KubectlResult, error) {
	if kubeconfig == "" {
		kubeconfig = c.Kubeconfig
	}
	path := append(append([]string{}, pluginDirs...), filepath.SplitList(os.Getenv("PATH"))...)
	argv := inNetns(c.HubNetns, append([]string{filepath.Join(c.bins.K8s, "kubectl")}, args...)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// KUBECONFIG rather than --kubeconfig: kubectl looks a plugin up only
	// when its name comes before any flag, and passes the environment on.
	cmd.Env = append(os.Environ(), "PATH="+joinPath(path), "KUBECONFIG="+kubeconfig)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := KubectlResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.Code = ee.ExitCode()
		return res, nil
	}
	return res, err
}

func joinPath(dirs []string) string {
	var b bytes.Buffer
	for i, d := range dirs {
		if i > 0 {
			b.WriteByte(os.PathListSeparator)
		}
		b.WriteString(d)
	}
	return b.String()
}

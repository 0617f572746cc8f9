package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/holdfast-io/holdfast/internal/version"
)

func runMain(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// Every command's --help shows examples and the exit codes, and exits 0.
func TestHelpShowsExamplesAndExitCodes(t *testing.T) {
	for _, cmd := range [][]string{{}, {"status"}, {"swap"}, {"failover"}, {"restart"}, {"version"}} {
		code, out, errOut := runMain(append(cmd, "--help")...)
		if code != ExitOK {
			t.Errorf("%v --help: exit %d, stderr %s", cmd, code, errOut)
		}
		for _, want := range []string{"Examples:", "kubectl holdfast", "Exit codes:", "  2  usage error", "  4  --wait timed out"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v --help lacks %q:\n%s", cmd, want, out)
			}
		}
	}
}

// Usage errors are 2 before anything reaches a cluster.
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"status", "extra"},
		{"status", "-o", "xml"},
		{"version", "-o", "wide"},
		{"version", "extra"},
		{"swap"},
		{"swap", "a", "a"},
		{"failover", "u"},
		{"restart"},
		{"restart", "--nope"},
	} {
		code, _, errOut := runMain(append(args, "--kubeconfig", "/nonexistent")...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, ExitUsage, errOut)
		}
		if !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("%v: stderr %q does not start with error:", args, errOut)
		}
	}
}

func TestSwapNamePrefixFitsAName(t *testing.T) {
	long := strings.Repeat("n", 253)
	for _, tc := range []struct{ out, in, want string }{
		{"cp-3", "edge-7", "swap-cp-3-edge-7-"},
		{"cp-3", "", "swap-cp-3-"},
	} {
		if got := swapNamePrefix(tc.out, tc.in); got != tc.want {
			t.Errorf("swapNamePrefix(%q, %q) = %q, want %q", tc.out, tc.in, got, tc.want)
		}
	}
	// generateName adds 5 characters; a name is at most 253.
	if p := swapNamePrefix(long, long); len(p)+5 > 253 || !strings.HasSuffix(p, "-") {
		t.Errorf("prefix for long names is %d characters: %q", len(p), p)
	}
}

// Help reads as kubectl's does for a plugin: every usage line and example
// starts "kubectl holdfast", and no completion command of its own is
// offered (it would replace kubectl's completion).
func TestHelpReadsAsKubectlHoldfast(t *testing.T) {
	_, out, _ := runMain("--help")
	for _, want := range []string{"Usage:\n  kubectl holdfast [command]", "Use \"kubectl holdfast [command] --help\""} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "      --version ") || strings.Contains(out, "-v, --version") {
		t.Errorf("--help: want --version without kubectl's verbosity shorthand -v:\n%s", out)
	}
	if strings.Contains(out, "completion") {
		t.Errorf("--help offers a completion command:\n%s", out)
	}
	_, out, _ = runMain("status", "--help")
	if !strings.Contains(out, "Usage:\n  kubectl holdfast status [flags]") || !strings.Contains(out, "-A, --all-namespaces") {
		t.Errorf("status --help:\n%s", out)
	}
	if code, _, errOut := runMain("completion", "bash"); code != ExitUsage {
		t.Errorf("completion bash: exit %d (stderr %q), want a usage error", code, errOut)
	}
}

// Completion goes through cobra's __complete, which the
// kubectl_complete-holdfast script kubectl runs calls.
func TestCompletionThroughKubectlCompleteScript(t *testing.T) {
	code, out, _ := runMain("__complete", "")
	if code != ExitOK {
		t.Fatalf("__complete: exit %d", code)
	}
	for _, want := range []string{"status", "swap", "failover", "restart", "version"} {
		if !strings.Contains(out, want+"\t") {
			t.Errorf("__complete lacks %q:\n%s", want, out)
		}
	}
	script, err := os.ReadFile("krew/kubectl_complete-holdfast")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "kubectl-holdfast __complete \"$@\"") {
		t.Errorf("krew/kubectl_complete-holdfast does not call __complete:\n%s", script)
	}
}

func TestVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v0.1.0-rc.1"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runMain(args...)
		if code != ExitOK || !strings.HasPrefix(out, "kubectl-holdfast v0.1.0-rc.1 ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, _ := runMain("version", "-o", "json")
	var v VersionReport
	if err := json.Unmarshal([]byte(out), &v); code != ExitOK || err != nil || v.APIVersion != ReportAPIVersion || v.Kind != "VersionReport" ||
		v.ClientVersion.Version != "v0.1.0-rc.1" {
		t.Errorf("version -o json: exit %d, %v, %q", code, err, out)
	}
}

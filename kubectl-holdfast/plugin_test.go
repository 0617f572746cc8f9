package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runMain(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// Every command's --help shows examples and the exit codes, and exits 0.
func TestHelpShowsExamplesAndExitCodes(t *testing.T) {
	for _, cmd := range [][]string{{}, {"status"}, {"swap"}, {"failover"}, {"restart"}} {
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
		{"status", "-o", "yaml"},
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

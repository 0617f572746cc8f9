//go:build integration

package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every binary `make build` makes reports the chart's appVersion, the one
// place the version is written: the Makefile stamps it, each --version
// prints it.
func TestEveryBinaryReportsTheChartsAppVersion(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join(root, "charts/holdfast/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	want := "v" + string(m[1])
	dir := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", root, "build", "BIN_DIR="+dir).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, bin := range []string{"holdfast-controller", "holdfast-node", "holdfast-webhook", "holdfast-scheduler", "unit-runtime", "device-simulator"} {
		out, err := exec.Command(filepath.Join(dir, bin), "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), bin+" "+want+" ") {
			t.Errorf("%s --version: %v\n%s\nwant a first line starting %q", bin, err, out, bin+" "+want+" ")
		}
	}
}

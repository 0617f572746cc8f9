package version

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStringNamesVersionRevisionAndGo(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v0.1.0", GoVersion: "go1.26.8"}, "v0.1.0 go1.26.8"},
		{Info{Version: "v0.1.0", Revision: "0123456789abcdef0123", GoVersion: "go1.26.8"}, "v0.1.0 (0123456789ab) go1.26.8"},
		{Info{Version: "v0.1.0", Revision: "0123456789ab", Modified: true, GoVersion: "go1.26.8"}, "v0.1.0 (0123456789ab, modified) go1.26.8"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGetReportsTheStampedVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-test"
	if got := Get(); got.Version != "v9.9.9-test" || got.GoVersion == "" {
		t.Errorf("Get() = %+v, want the stamped version and a Go version", got)
	}
}

func TestTheVersionFlagAndLineNameTheStampedVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-test"
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := Flag(fs)
	if err := fs.Parse([]string{"--version"}); err != nil || !*v {
		t.Fatalf("--version: %v, set %v", err, *v)
	}
	var b bytes.Buffer
	Print(&b, "holdfast-webhook")
	if got := b.String(); !strings.HasPrefix(got, "holdfast-webhook v9.9.9-test ") || !strings.HasSuffix(got, "\n") {
		t.Errorf("Print wrote %q", got)
	}
}

func TestBuildInfoIsOneSeriesOfTheStampedVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-test"
	reg := prometheus.NewRegistry()
	Register(reg)
	Register(reg) // a second registration keeps the first
	in := Get()
	want := `# HELP holdfast_build_info Always 1, labelled with the build's version, the commit it was built from (revision) and its Go version.
# TYPE holdfast_build_info gauge
holdfast_build_info{go_version="` + in.GoVersion + `",revision="` + in.Revision + `",version="v9.9.9-test"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "holdfast_build_info"); err != nil {
		t.Error(err)
	}
}

func TestRequestedReadsTheVersionFlagBeforeTheArgumentsEnd(t *testing.T) {
	for args, want := range map[string]bool{
		"--version": true, "--config=x --version=true": true, "--version=raw": true,
		"--version=false": false, "--config=x": false, "-- --version": false, "": false,
	} {
		if got := Requested(strings.Fields(args)); got != want {
			t.Errorf("Requested(%q) = %v, want %v", args, got, want)
		}
	}
}

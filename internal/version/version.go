// Package version is the one place every holdfast binary takes its version
// from: Version is stamped at link time (make build, make release and the
// image build pass -ldflags "-X .../internal/version.Version=v1.2.3"), the
// commit and Go version come from the build information Go records.
package version

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release this binary was built as; a build that was not
// stamped reports the development version.
var Version = "v0.0.0-dev"

// Info is what a binary reports about its build.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
}

// Get reads the build's information.
func Get() Info {
	in := Info{Version: Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	in.GoVersion = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one line a --version flag prints: the binary's name, its
// version, and the commit it was built from when known.
func (in Info) String() string {
	s := in.Version
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (" + rev
		if in.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s", s, in.GoVersion)
}

// Flag registers --version on fs; a binary that sees it set prints Line
// and exits 0 before it does anything else.
func Flag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "Print the version, the commit and the Go version of this build, and exit")
}

// Print writes the line --version prints: binary and Get().
func Print(w io.Writer, binary string) {
	fmt.Fprintf(w, "%s %s\n", binary, Get())
}

// Register adds holdfast_build_info to reg (once: a registry that has it
// keeps it), so a dashboard or an alert can tell which build runs where.
func Register(reg prometheus.Registerer) {
	in := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "holdfast", Name: "build_info",
		Help:        "Always 1, labelled with the build's version, the commit it was built from (revision) and its Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "go_version": in.GoVersion},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
			panic(err)
		}
	}
}

// Module is the version of the module at path this binary was built with
// ("unknown" when the build recorded none): holdfast-scheduler reports the
// kube-scheduler it embeds.
func Module(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

// Requested reports whether args ask for the version the way a cobra
// command's --version flag does (--version, or --version=true|raw), before
// any "--".
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "--version=true", "--version=raw":
			return true
		}
	}
	return false
}

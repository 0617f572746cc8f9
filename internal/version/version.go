// Package version is the one place every holdfast binary takes its version
// from: Version is stamped at link time (make build, make release and the
// image build pass -ldflags "-X .../internal/version.Version=v1.2.3"), the
// commit and Go version come from the build information Go records.
package version

import (
	"fmt"
	"runtime/debug"
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

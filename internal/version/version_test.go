package version

import "testing"

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

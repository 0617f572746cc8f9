package hoststate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMoveMemberDataAsideResumesFromEveryCrashPoint starts from each state
// a crash inside MoveMemberDataAside can leave and checks that a repeat
// ends with exactly one moved-aside copy, the newest.
func TestMoveMemberDataAsideResumesFromEveryCrashPoint(t *testing.T) {
	for name, setup := range map[string]func(s hoststate.State){
		"before anything": func(s hoststate.State) {
			write(t, filepath.Join(s.MovedAside(), "v"), "old")
			write(t, filepath.Join(s.MemberDataDir, "v"), "new")
		},
		"old copy renamed away": func(s hoststate.State) {
			write(t, filepath.Join(s.MovedAside()+".old", "v"), "old")
			write(t, filepath.Join(s.MemberDataDir, "v"), "new")
		},
		"new copy moved, old not yet removed": func(s hoststate.State) {
			write(t, filepath.Join(s.MovedAside()+".old", "v"), "old")
			write(t, filepath.Join(s.MovedAside(), "v"), "new")
		},
		"done": func(s hoststate.State) { write(t, filepath.Join(s.MovedAside(), "v"), "new") },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")}
			setup(s)
			if err := s.MoveMemberDataAside(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(s.MovedAside(), "v")); got != "new" {
				t.Fatalf("moved-aside copy holds %q, want the newest", got)
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if strings.Join(names, ",") != "db"+hoststate.MovedAsideSuffix {
				t.Fatalf("left %v, want only the moved-aside copy", names)
			}
		})
	}
}

func TestRoleIsExitCodes(t *testing.T) {
	dir := t.TempDir()
	s := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")}
	run := func(role string) (int, string) {
		var out bytes.Buffer
		code := hoststate.RoleIsMain([]string{"--host-dir", s.Dir, "--member-data-dir", s.MemberDataDir, role}, &out)
		return code, out.String()
	}
	if c, _ := run("server"); c != hoststate.RoleIsYes {
		t.Fatalf("a host holdfast never switched: role-is server = %d, want yes", c)
	}
	if err := s.SetRole(holdfastv1.RoleAgent); err != nil {
		t.Fatal(err)
	}
	if c, msg := run("server"); c != hoststate.RoleIsNo || !strings.Contains(msg, "says agent") {
		t.Fatalf("role file agent: %d %q", c, msg)
	}
	if c, _ := run("agent"); c != hoststate.RoleIsYes {
		t.Fatalf("role file agent: role-is agent = %d", c)
	}
	write(t, filepath.Join(s.Dir, hoststate.RoleFile), "voter\n")
	if c, _ := run("server"); c != hoststate.RoleIsError {
		t.Fatalf("an unreadable role file must fail the start (255), got %d", c)
	}
	if c, _ := run("nonsense"); c != hoststate.RoleIsError {
		t.Fatalf("usage error: %d", c)
	}
}

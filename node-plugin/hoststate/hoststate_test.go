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
			s := hoststate.State{Dir: t.TempDir(), MemberDataDir: filepath.Join(dir, "db")}
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

// TestTheServersOwnTombstoneKeepsItsServerOut: the tombstone the server
// writes itself (k3s: server/db/etcd/tombstone, or a configured path) keeps
// the server from starting as holdfast's own does, through role-is as
// through ServerAllowed; finishing the host retires it with the data, or
// beside itself when it lies elsewhere.
func TestTheServersOwnTombstoneKeepsItsServerOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		// custom is the configured path under the test dir ("": k3s's).
		custom string
	}{{"k3s's path under the member data", ""}, {"a configured path", "state/removed"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "server", "db")}
			args := []string{"--host-dir", s.Dir, "--member-data-dir", s.MemberDataDir}
			if tc.custom != "" {
				s.ServerTombstone = filepath.Join(dir, tc.custom)
				args = append(args, "--server-tombstone", s.ServerTombstone)
			}
			write(t, filepath.Join(s.MemberDataDir, "member", "wal"), "data")
			if err := s.SetRole(holdfastv1.RoleServer); err != nil {
				t.Fatal(err)
			}
			roleIs := func() (int, string) {
				var out bytes.Buffer
				return hoststate.RoleIsMain(append(append([]string{}, args...), "server"), &out), out.String()
			}
			if c, msg := roleIs(); c != hoststate.RoleIsYes {
				t.Fatalf("a member with no tombstone: role-is server = %d %q, want yes", c, msg)
			}
			want := filepath.Join(s.MemberDataDir, "etcd", "tombstone")
			if tc.custom != "" {
				want = s.ServerTombstone
			}
			if got := s.ServerTombstonePath(); got != want {
				t.Fatalf("server tombstone path %s, want %s", got, want)
			}
			write(t, want, "")
			if ok, why, err := s.ServerAllowed(); err != nil || ok || !strings.Contains(why, want) {
				t.Fatalf("ServerAllowed with the server's own tombstone = %v %q %v, want refused naming %s", ok, why, err, want)
			}
			if c, msg := roleIs(); c != hoststate.RoleIsNo || !strings.Contains(msg, "its own tombstone") {
				t.Fatalf("role-is server with the server's own tombstone = %d %q, want no", c, msg)
			}
			if why, _ := s.Removed(); why == "" {
				t.Fatal("Removed says nothing with the server's own tombstone")
			}
			// finish-demote's host work: data aside, tombstones retired.
			if err := s.MoveMemberDataAside(); err != nil {
				t.Fatal(err)
			}
			if err := s.RetireTombstone(); err != nil {
				t.Fatal(err)
			}
			if why, _ := s.Removed(); why != "" {
				t.Fatalf("after the host was finished: %s", why)
			}
		})
	}
}

// TestAFormerMemberIsKnownFromTheHostStateAlone: moving the member data
// aside records it in the host state directory, so a start condition that
// sees that directory and the member data directory but not their parent
// (the etcd static pod's init container) still refuses a former member
// with no cluster to join, and allows it with a join target.
func TestAFormerMemberIsKnownFromTheHostStateAlone(t *testing.T) {
	dir := t.TempDir()
	s := hoststate.State{Dir: filepath.Join(dir, "holdfast"), MemberDataDir: filepath.Join(dir, "db")}
	write(t, filepath.Join(s.MemberDataDir, "member", "wal"), "data")
	if err := s.MoveMemberDataAside(); err != nil {
		t.Fatal(err)
	}
	// The start condition's view: the moved-aside copy is not in it.
	view := hoststate.State{Dir: s.Dir, MemberDataDir: filepath.Join(t.TempDir(), "db")}
	if ok, why, err := view.ServerAllowed(); err != nil || ok || !strings.Contains(why, "would bootstrap a second cluster") {
		t.Fatalf("a former member with no join target, seen without the member data's parent: %v %q %v", ok, why, err)
	}
	if err := view.SetJoin("a=https://10.0.0.1:2380"); err != nil {
		t.Fatal(err)
	}
	if ok, why, err := view.ServerAllowed(); err != nil || !ok {
		t.Fatalf("a former member with a join target: %v %q %v", ok, why, err)
	}
	// A host whose member data was never moved records nothing.
	fresh := hoststate.State{Dir: filepath.Join(t.TempDir(), "holdfast"), MemberDataDir: filepath.Join(dir, "none")}
	if err := fresh.MoveMemberDataAside(); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := fresh.ServerAllowed(); err != nil || !ok {
		t.Fatalf("a host that never was a member: %v %v", ok, err)
	}
}

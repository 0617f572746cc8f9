// Package hoststate is the node plugin's record on the host: the role file,
// the join target, the local member and its tombstone, under one directory
// (default /var/lib/holdfast), and the member data directory it moves aside.
// These files are what guard the server unit when the apiserver is away, so
// every write is atomic (temporary file, fsync, rename, fsync of the directory).
package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
)

// DefaultDir is where the node plugin keeps its host state.
const DefaultDir = "/var/lib/holdfast"

// File names under Dir.
const (
	// RoleFile holds "server" or "agent": the role the host may run.
	RoleFile = "role"
	// JoinFile holds the members a promoted server joins (AnnotationRoleJoin).
	JoinFile = "join"
	// MemberFile records the local etcd member while it is one.
	MemberFile = "member.json"
	// TombstoneFile records the local member's removal.
	TombstoneFile = "tombstone.json"
	// EndpointsFile holds the voters' client URLs of the last member list
	// the node plugin read: where the server's start condition asks at
	// boot, before the node plugin runs.
	EndpointsFile = "member-endpoints.json"
	// RetiredTombstoneFile keeps the last tombstone once its member data was
	// moved aside by finish-demote, for people.
	RetiredTombstoneFile = "tombstone.retired.json"
	// FenceAuditDir is the fence agent's own directory under Dir, holding
	// only its audit and the Events it has posted: with voter swaps off the
	// chart mounts the pod's own emptyDir there and nothing of the host, so
	// the agent reaches none of the files above, which the host's units read.
	FenceAuditDir = "fence"
)

// MovedAsideSuffix is appended to the member data directory when a
// finish-demote or rollback moves it aside; one copy, the newest, is kept.
const MovedAsideSuffix = ".demoted"

// Member is the local etcd member as its own endpoint last reported it.
type Member struct {
	// ID and ClusterID in hex, as etcdctl prints them.
	ID        string `json:"id"`
	ClusterID string `json:"clusterID"`
	Name      string `json:"name,omitempty"`
}

// State is the host state: Dir holds the node plugin's files, MemberDataDir
// is the etcd member's data directory (VoterPolicy spec.host.memberDataDir).
type State struct {
	Dir           string
	MemberDataDir string
	// ServerTombstone is the file the server writes itself when its member
	// is removed (k3s: server/db/etcd/tombstone); empty is
	// DefaultServerTombstone under MemberDataDir.
	ServerTombstone string
	// OnLockWait, when set, is called when Lock finds the lock held and is
	// about to wait: an ordering hook for tests.
	OnLockWait func()
}

// Role returns the role file's content: RoleServer, RoleAgent, or "" when
// there is no role file (a host holdfast has not switched yet).
func (s State) Role() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, RoleFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	role := strings.TrimSpace(string(b))
	if role != holdfastv1.RoleServer && role != holdfastv1.RoleAgent {
		return "", fmt.Errorf("role file %s: %q is not a role (server or agent)", filepath.Join(s.Dir, RoleFile), role)
	}
	return role, nil
}

// SetRole writes the role file.
func (s State) SetRole(role string) error {
	if role != holdfastv1.RoleServer && role != holdfastv1.RoleAgent {
		return fmt.Errorf("%q is not a role (server or agent)", role)
	}
	return s.write(RoleFile, []byte(role+"\n"))
}

// Join returns the join target, "" when there is none.
func (s State) Join() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, JoinFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// SetJoin writes the join target.
func (s State) SetJoin(join string) error { return s.write(JoinFile, []byte(join+"\n")) }

// ClearJoin removes the join target.
func (s State) ClearJoin() error { return s.remove(JoinFile) }

// Member returns the recorded local member, nil when none is recorded.
func (s State) Member() (*Member, error) {
	var m Member
	ok, err := s.readJSON(MemberFile, &m)
	if !ok {
		return nil, err
	}
	return &m, nil
}

// SetMember records the local member.
func (s State) SetMember(m Member) error { return s.writeJSON(MemberFile, m) }

// MemberEndpoints are the voters' client URLs the node plugin last read;
// none when it never read a member list.
func (s State) MemberEndpoints() ([]string, error) {
	var urls []string
	_, err := s.readJSON(EndpointsFile, &urls)
	return urls, err
}

// SetMemberEndpoints records the voters' client URLs of a member list.
func (s State) SetMemberEndpoints(urls []string) error { return s.writeJSON(EndpointsFile, urls) }

// Tombstone returns the tombstone, nil when there is none.
func (s State) Tombstone() (*holdfastv1.Tombstone, error) {
	var t holdfastv1.Tombstone
	ok, err := s.readJSON(TombstoneFile, &t)
	if !ok {
		return nil, err
	}
	return &t, nil
}

// SetTombstone writes the tombstone.
func (s State) SetTombstone(t holdfastv1.Tombstone) error { return s.writeJSON(TombstoneFile, t) }

// DefaultServerTombstone is where k3s writes its own tombstone, relative to
// the member data directory (server/db).
const DefaultServerTombstone = "etcd/tombstone"

// ServerTombstonePath is the server's own tombstone file.
func (s State) ServerTombstonePath() string {
	if s.ServerTombstone != "" {
		return s.ServerTombstone
	}
	return filepath.Join(s.MemberDataDir, DefaultServerTombstone)
}

// HasServerTombstone says whether the server wrote its own tombstone.
func (s State) HasServerTombstone() (bool, error) { return exists(s.ServerTombstonePath()) }

// Removed says why the host's member is known to be removed: holdfast's
// tombstone or the server's own; "" when neither exists.
func (s State) Removed() (string, error) {
	t, err := s.Tombstone()
	if err != nil {
		return "", err
	}
	if t != nil {
		return fmt.Sprintf("member %s was removed from cluster %s (tombstone %s)", t.MemberID, t.ClusterID, filepath.Join(s.Dir, TombstoneFile)), nil
	}
	has, err := s.HasServerTombstone()
	if err != nil {
		return "", err
	}
	if has {
		return fmt.Sprintf("the server recorded its member's removal (its own tombstone %s)", s.ServerTombstonePath()), nil
	}
	return "", nil
}

// RetireTombstone moves the tombstones aside once the member data they
// guarded has been moved aside: from then on the moved-aside data guards the
// server (ServerAllowed), and a later promote with a join target may start
// it. The server's own tombstone usually lies in the data and went with it;
// one configured elsewhere is renamed beside itself.
func (s State) RetireTombstone() error {
	if err := retire(filepath.Join(s.Dir, TombstoneFile), filepath.Join(s.Dir, RetiredTombstoneFile)); err != nil {
		return err
	}
	p := s.ServerTombstonePath()
	return retire(p, p+".retired")
}

func retire(from, to string) error {
	err := os.Rename(from, to)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(from))
}

// MovedAside is the path of the moved-aside member data.
func (s State) MovedAside() string { return filepath.Clean(s.MemberDataDir) + MovedAsideSuffix }

// HasMovedAside says whether moved-aside member data exists.
func (s State) HasMovedAside() (bool, error) { return exists(s.MovedAside()) }

// HasMemberData says whether the member data directory exists.
func (s State) HasMemberData() (bool, error) { return exists(s.MemberDataDir) }

// MoveMemberDataAside moves the member data directory to MovedAside, keeping
// only the newest copy. Safe to repeat after a crash at any point: the old
// copy is renamed away before the new one takes its name, and only removed
// after, so one copy always exists.
func (s State) MoveMemberDataAside() error {
	aside := s.MovedAside()
	old := aside + ".old"
	has, err := s.HasMemberData()
	if err != nil {
		return err
	}
	if has {
		if ok, err := exists(aside); err != nil {
			return err
		} else if ok {
			if err := os.RemoveAll(old); err != nil {
				return err
			}
			if err := os.Rename(aside, old); err != nil {
				return err
			}
		}
		if err := os.Rename(s.MemberDataDir, aside); err != nil {
			return err
		}
		if err := atomicfile.SyncDir(filepath.Dir(aside)); err != nil {
			return err
		}
	}
	return os.RemoveAll(old)
}

// ServerAllowed says whether the host may start its server unit, and why
// not. It holds with the apiserver away: it reads only host files.
//   - a tombstone, holdfast's or the server's own: the member was removed,
//     and the server would rejoin it as a new member;
//   - a role file naming agent;
//   - moved-aside member data and no join target: a former member with no
//     cluster to join would bootstrap a second cluster.
//
// No role file (a host holdfast never switched) allows the start.
func (s State) ServerAllowed() (bool, string, error) {
	if why, err := s.Removed(); err != nil || why != "" {
		return false, why, err
	}
	role, err := s.Role()
	if err != nil {
		return false, "", err
	}
	if role == holdfastv1.RoleAgent {
		return false, fmt.Sprintf("the role file %s says agent", filepath.Join(s.Dir, RoleFile)), nil
	}
	aside, err := s.HasMovedAside()
	if err != nil {
		return false, "", err
	}
	join, err := s.Join()
	if err != nil {
		return false, "", err
	}
	if aside && join == "" {
		return false, fmt.Sprintf("this host was a member (%s exists) and has no cluster to join: it would bootstrap a second cluster", s.MovedAside()), nil
	}
	return true, "", nil
}

func (s State) readJSON(name string, v any) (bool, error) {
	return atomicfile.ReadJSON(s.Dir, name, v)
}

func (s State) writeJSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(name, append(b, '\n'))
}

// write replaces a host file atomically, creating Dir on a host holdfast
// never wrote to. The files are 0644: people inspecting the host read them.
func (s State) write(name string, data []byte) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(s.Dir, name, data, 0o644)
}

func (s State) remove(name string) error {
	err := os.Remove(filepath.Join(s.Dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(s.Dir)
}

func exists(p string) (bool, error) {
	_, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ClearMember forgets the local member once its data was moved aside.
func (s State) ClearMember() error { return s.remove(MemberFile) }

// StartedAtFile records when a promote last started the server unit, so a
// resumed promote reports the same start.
const StartedAtFile = "server-started-at"

// ServerStartedAt is when a promote last started the server unit; zero when
// none did.
func (s State) ServerStartedAt() (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, StartedAtFile))
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
}

// ClearServerStartedAt forgets the server's start once the host is
// finished to an agent: the record is a promote's, and a later promote
// starts its server anew.
func (s State) ClearServerStartedAt() error { return s.remove(StartedAtFile) }

// SetServerStartedAt records a start of the server unit.
func (s State) SetServerStartedAt(t time.Time) error {
	return s.write(StartedAtFile, []byte(t.UTC().Format(time.RFC3339Nano)+"\n"))
}

// Package actuator switches a host between the server role (an etcd member)
// and the agent role through systemd, and keeps the guards that hold when
// the apiserver is away: the role file, the join target, the tombstone and
// the moved-aside member data (package hoststate), and a runtime mask on the
// server unit. Every step is idempotent and safe to repeat after a crash at
// any point: each one writes the host files first and the units after, and
// re-running it redoes only what is not yet so.
package actuator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/atomicfile"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// Systemd is the part of systemd the actuator uses. The real one talks to
// the host's systemd over D-Bus (systemd_linux.go).
type Systemd interface {
	// Start starts a unit and waits for it to be active.
	Start(ctx context.Context, unit string) error
	// Stop stops a unit and waits for it to be inactive.
	Stop(ctx context.Context, unit string) error
	// Restart restarts a unit and waits for it to be active.
	Restart(ctx context.Context, unit string) error
	Enable(ctx context.Context, unit string) error
	Disable(ctx context.Context, unit string) error
	// MaskRuntime masks a unit until the next boot (/run/systemd/system),
	// so nothing (Restart=, a dependency, a person) can start it.
	MaskRuntime(ctx context.Context, unit string) error
	UnmaskRuntime(ctx context.Context, unit string) error
	// Reload makes systemd re-read unit files and drop-ins.
	Reload(ctx context.Context) error
	// ActiveState is the unit's ActiveState (active, inactive, failed...).
	ActiveState(ctx context.Context, unit string) (string, error)
	// LoadState is the unit's LoadState (loaded, not-found, masked...).
	LoadState(ctx context.Context, unit string) (string, error)
}

// Drop-in file names in <SystemdDir>/<server unit>.d/.
const (
	// JoinDropIn gives the server unit the members to join:
	// HOLDFAST_JOIN (AnnotationRoleJoin, etcd's initial-cluster form) and
	// HOLDFAST_CLUSTER_STATE=existing, so a promoted host never bootstraps.
	JoinDropIn = "50-holdfast-join.conf"
	// LevelDropIn holds a stepped-down server out of serving:
	// HOLDFAST_LEVEL=etcd-only (the member keeps voting until removed).
	LevelDropIn = "50-holdfast-level.conf"
	// StartDropIn holds the server unit's start condition: the node
	// plugin's judgment of the host (holdfast-node start-condition). It
	// stays for good: every start, a boot's included, is judged.
	StartDropIn = "40-holdfast-start.conf"
)

// Environment variables the drop-ins set for the server unit.
const (
	EnvJoin         = "HOLDFAST_JOIN"
	EnvClusterState = "HOLDFAST_CLUSTER_STATE"
	EnvLevel        = "HOLDFAST_LEVEL"
	LevelEtcdOnly   = "etcd-only"
)

// DefaultSystemdDir is where persistent drop-ins go.
const DefaultSystemdDir = "/etc/systemd/system"

// Config says what the actuator switches.
type Config struct {
	// ServerUnit and AgentUnit are VoterPolicy spec.host's units.
	ServerUnit string
	AgentUnit  string
	// SystemdDir holds the server unit's drop-in directory.
	SystemdDir string
	// State is the host state (role file, join, tombstone, member data).
	State hoststate.State
	// NodeName is this node: the name its member starts under.
	NodeName string
	// Members answers whether the member the server unit runs is one of the
	// cluster it was told to join: a promote is done only then.
	Members Membership
	// Timeout bounds a promote's wait for the member to join, from the
	// server's start; past it the step fails (and is retried with backoff)
	// with what the member lacks. Recheck is how soon a waiting step looks
	// again.
	Timeout, Recheck time.Duration
	Clock            clock.PassiveClock
}

// Defaults of Config.
const (
	DefaultJoinTimeout = 5 * time.Minute
	DefaultJoinRecheck = 2 * time.Second
)

// Actuator carries out the host half of a voter swap.
type Actuator struct {
	sd  Systemd
	cfg Config
}

// New returns an actuator.
func New(sd Systemd, cfg Config) *Actuator {
	if cfg.SystemdDir == "" {
		cfg.SystemdDir = DefaultSystemdDir
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultJoinTimeout
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = DefaultJoinRecheck
	}
	return &Actuator{sd: sd, cfg: cfg}
}

// RefusedError is a step the host must not carry out; nothing was changed.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// IsRefused says whether err is a refusal.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Provisioned says whether the server unit is installed on the host.
func (a *Actuator) Provisioned(ctx context.Context) (bool, error) {
	s, err := a.sd.LoadState(ctx, a.cfg.ServerUnit)
	if err != nil {
		return false, err
	}
	// A runtime-masked unit reports masked: it is installed all the same.
	return s == "loaded" || s == "masked", nil
}

// Promote makes the host a server that joins the members in join
// (AnnotationRoleJoin): join target and drop-in, role file server, agent
// unit stopped and disabled, server unit unmasked, enabled and started. It
// is done once the server unit is active and its member has joined the
// cluster (joined): an active unit says only that a process runs, which
// one serving a former cluster's data, or bootstrapping its own, does as
// well. Until then it returns a WaitingError, and a failure saying what
// the member lacks past Timeout after the server's start. It returns the
// time this promote, or an earlier one of the same join, started the
// server.
func (a *Actuator) Promote(ctx context.Context, join string) (time.Time, error) {
	if _, errs := holdfastv1.ParseRoleJoin(join); len(errs) > 0 {
		return time.Time{}, &RefusedError{Reason: errs.ToAggregate().Error()}
	}
	if ok, err := a.Provisioned(ctx); err != nil {
		return time.Time{}, err
	} else if !ok {
		return time.Time{}, &RefusedError{Reason: fmt.Sprintf("host not provisioned: server unit %s is not installed", a.cfg.ServerUnit)}
	}
	removed, err := a.cfg.State.Removed()
	if err != nil {
		return time.Time{}, err
	}
	if removed != "" {
		return time.Time{}, &RefusedError{Reason: removed + "; the host is not finished to an agent yet"}
	}
	st := a.cfg.State
	prevJoin, err := st.Join()
	if err != nil {
		return time.Time{}, err
	}
	// The join target first: the role file may then say server without the
	// never-bootstrap guard ever seeing a former member with nowhere to join.
	if err := st.SetJoin(join); err != nil {
		return time.Time{}, err
	}
	if err := a.writeDropIn(JoinDropIn, map[string]string{EnvJoin: join, EnvClusterState: "existing"}); err != nil {
		return time.Time{}, err
	}
	if err := a.removeDropIn(LevelDropIn); err != nil {
		return time.Time{}, err
	}
	if err := st.SetRole(holdfastv1.RoleServer); err != nil {
		return time.Time{}, err
	}
	if err := a.sd.Reload(ctx); err != nil {
		return time.Time{}, err
	}
	if err := a.sd.Stop(ctx, a.cfg.AgentUnit); err != nil {
		return time.Time{}, err
	}
	if err := a.sd.Disable(ctx, a.cfg.AgentUnit); err != nil {
		return time.Time{}, err
	}
	if err := a.sd.UnmaskRuntime(ctx, a.cfg.ServerUnit); err != nil {
		return time.Time{}, err
	}
	if err := a.sd.Enable(ctx, a.cfg.ServerUnit); err != nil {
		return time.Time{}, err
	}
	state, err := a.sd.ActiveState(ctx, a.cfg.ServerUnit)
	if err != nil {
		return time.Time{}, err
	}
	// The start this promote, or an earlier one of the same join (before a
	// crash, or a wait), recorded: it is reported, and the wait for the
	// member is bounded from it, so a server that keeps restarting without
	// joining fails the step rather than waiting from each restart.
	started, err := st.ServerStartedAt()
	if err != nil {
		return time.Time{}, err
	}
	if started.IsZero() || prevJoin != join {
		started = a.cfg.Clock.Now()
		if err := st.SetServerStartedAt(started); err != nil {
			return time.Time{}, err
		}
	}
	if state != "active" {
		if err := a.sd.Start(ctx, a.cfg.ServerUnit); err != nil {
			return started, err
		}
	}
	if what := joined(ctx, a.cfg.Members, a.cfg.NodeName); what != "" {
		return started, bound{clock: a.cfg.Clock, timeout: a.cfg.Timeout, recheck: a.cfg.Recheck, since: "the server unit started"}.waitOrFail(what, started)
	}
	return started, nil
}

// StepDown holds the server out of serving (level drop-in, restart) and
// then writes the role file agent and masks the server unit, before the
// controller removes the member: from then on a restart of the server (a
// crash with Restart=always, a reboot) never brings the member back. The
// running member keeps voting until it is removed.
func (a *Actuator) StepDown(ctx context.Context) error {
	st := a.cfg.State
	role, err := st.Role()
	if err != nil {
		return err
	}
	if role != holdfastv1.RoleAgent {
		// The restart happens strictly before the role file says agent, so
		// a step-down resumed after the role file skips it (it would be
		// refused by the unit's ExecCondition anyway).
		if err := a.writeDropIn(LevelDropIn, map[string]string{EnvLevel: LevelEtcdOnly}); err != nil {
			return err
		}
		if err := a.sd.Reload(ctx); err != nil {
			return err
		}
		state, err := a.sd.ActiveState(ctx, a.cfg.ServerUnit)
		if err != nil {
			return err
		}
		if state == "active" {
			if err := a.sd.Restart(ctx, a.cfg.ServerUnit); err != nil {
				return err
			}
		}
		if err := st.SetRole(holdfastv1.RoleAgent); err != nil {
			return err
		}
	}
	return a.sd.MaskRuntime(ctx, a.cfg.ServerUnit)
}

// FinishDemote finishes a removed member to an agent: role file agent,
// server unit masked, stopped and disabled, member data moved aside keeping
// the newest copy, the tombstone retired beside it, drop-ins and join target
// removed, agent unit enabled and started. Rollback is the same host work.
//
// It holds the host's member lock throughout (hoststate.State.Lock), so the
// tombstone check never interleaves with it.
func (a *Actuator) FinishDemote(ctx context.Context) error {
	st := a.cfg.State
	unlock, err := st.LockAsAgent()
	if err != nil {
		return err
	}
	defer unlock()
	if err := a.sd.MaskRuntime(ctx, a.cfg.ServerUnit); err != nil {
		return err
	}
	if err := a.sd.Stop(ctx, a.cfg.ServerUnit); err != nil {
		return err
	}
	if err := a.sd.Disable(ctx, a.cfg.ServerUnit); err != nil {
		return err
	}
	if err := retireMember(st); err != nil {
		return err
	}
	if err := a.removeDropIn(JoinDropIn); err != nil {
		return err
	}
	if err := a.removeDropIn(LevelDropIn); err != nil {
		return err
	}
	if err := st.ClearJoin(); err != nil {
		return err
	}
	if err := a.sd.Reload(ctx); err != nil {
		return err
	}
	if err := a.sd.Enable(ctx, a.cfg.AgentUnit); err != nil {
		return err
	}
	return a.sd.Start(ctx, a.cfg.AgentUnit)
}

// Rollback returns a candidate whose promotion failed to an agent.
func (a *Actuator) Rollback(ctx context.Context) error { return a.FinishDemote(ctx) }

// Guard masks the server unit at runtime when the host files forbid a
// server (tombstone, role file agent, former member with nowhere to join).
// It stops a running server only when a tombstone (holdfast's or the
// server's own) exists: that member is
// gone from its cluster, so stopping it never costs quorum, and a server
// that came back (a host down through its swap, a k3s rejoining as a new
// learner) must not stay. A stepped-down member with no tombstone keeps
// running: it votes until the controller removes it.
func (a *Actuator) Guard(ctx context.Context) (bool, string, error) {
	ok, why, err := a.cfg.State.ServerAllowed()
	if err != nil || ok {
		return ok, why, err
	}
	if p, err := a.Provisioned(ctx); err != nil || !p {
		return ok, why, err
	}
	if err := a.sd.MaskRuntime(ctx, a.cfg.ServerUnit); err != nil {
		return ok, why, err
	}
	removed, err := a.cfg.State.Removed()
	if err != nil || removed == "" {
		return ok, why, err
	}
	state, err := a.sd.ActiveState(ctx, a.cfg.ServerUnit)
	if err != nil || state == "inactive" {
		return ok, why, err
	}
	return ok, why, a.sd.Stop(ctx, a.cfg.ServerUnit)
}

func (a *Actuator) dropInDir() string {
	return filepath.Join(a.cfg.SystemdDir, a.cfg.ServerUnit+".d")
}

func (a *Actuator) writeDropIn(name string, env map[string]string) error {
	dir := a.dropInDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	body := "# Written by holdfast-node; removed when the host is finished to an agent.\n[Service]\n"
	for _, k := range sortedKeys(env) {
		body += "Environment=" + strconv.Quote(k+"="+env[k]) + "\n"
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// InstallStartCondition writes StartDropIn with argv as the server unit's
// ExecCondition (persistent, in SystemdDir: it holds after a reboot, before
// the node plugin runs) and reloads systemd when it changed.
func (a *Actuator) InstallStartCondition(ctx context.Context, argv []string) error {
	for _, w := range argv {
		if w == "" || strings.ContainsAny(w, " \t\"'\\$%;") {
			return fmt.Errorf("start condition argument %q: quote-free paths and flags only", w)
		}
	}
	body := "# Written by holdfast-node: the server starts only once holdfast-node has judged this\n" +
		"# host's member (the tombstones and the live member list). Kept for good.\n" +
		"[Service]\nExecCondition=" + strings.Join(argv, " ") + "\n"
	dir := a.dropInDir()
	path := filepath.Join(dir, StartDropIn)
	if old, err := os.ReadFile(path); err == nil && string(old) == body {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(dir, StartDropIn, []byte(body), 0o644); err != nil {
		return err
	}
	return a.sd.Reload(ctx)
}

func (a *Actuator) removeDropIn(name string) error {
	err := os.Remove(filepath.Join(a.dropInDir(), name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ActiveRole is the role whose unit is active: server, agent, or "" when
// neither is (the reporter's observed role).
func (a *Actuator) ActiveRole(ctx context.Context) (string, error) {
	for _, u := range []struct{ unit, role string }{{a.cfg.ServerUnit, holdfastv1.RoleServer}, {a.cfg.AgentUnit, holdfastv1.RoleAgent}} {
		s, err := a.sd.ActiveState(ctx, u.unit)
		if err != nil {
			return "", err
		}
		if s == "active" {
			return u.role, nil
		}
	}
	return "", nil
}

// retireMember is the host's record of a stopped, removed member put away,
// whichever actuator stopped it: its data moved aside keeping one copy,
// then its tombstone retired (the moved-aside data now guards the server:
// no join target, no start), then the member and its server's start
// forgotten.
func retireMember(st hoststate.State) error {
	if err := st.MoveMemberDataAside(); err != nil {
		return fmt.Errorf("moving member data aside: %w", err)
	}
	if err := st.RetireTombstone(); err != nil {
		return err
	}
	if err := st.ClearMember(); err != nil {
		return err
	}
	return st.ClearServerStartedAt()
}

package actuator

import (
	"context"
	"fmt"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/holdfast-io/holdfast/internal/dbusconn"
)

// DBusSystemd is Systemd over D-Bus through go-systemd.
type DBusSystemd struct{ Conn *sd.Conn }

// NewDBusSystemd connects to the host's systemd: the system bus, or its
// private socket when no bus answers (go-systemd's NewWithContext).
func NewDBusSystemd(ctx context.Context) (*DBusSystemd, error) {
	c, err := sd.NewWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd over D-Bus: %w", err)
	}
	return &DBusSystemd{Conn: c}, nil
}

// NewDBusSystemdAt connects to systemd through the bus at address
// (unix:path=...), with EXTERNAL auth as this process's uid: for a host
// whose system bus is elsewhere, and for tests against a double.
func NewDBusSystemdAt(address string) (*DBusSystemd, error) {
	c, err := sd.NewConnection(func() (*godbus.Conn, error) { return dbusconn.Dial(address) })
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd over D-Bus at %s: %w", address, err)
	}
	return &DBusSystemd{Conn: c}, nil
}

func (s *DBusSystemd) job(ctx context.Context, verb, unit string,
	call func(context.Context, string, string, chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := call(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("%s %s: %w", verb, unit, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("%s %s: job %s", verb, unit, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: %w", verb, unit, ctx.Err())
	}
}

// Start starts a unit and checks that it is active afterwards (a start the
// unit's ExecCondition skipped ends its job "done" with the unit inactive).
func (s *DBusSystemd) Start(ctx context.Context, unit string) error {
	if err := s.job(ctx, "start", unit, s.Conn.StartUnitContext); err != nil {
		return err
	}
	return s.wantActive(ctx, unit)
}

func (s *DBusSystemd) Stop(ctx context.Context, unit string) error {
	return s.job(ctx, "stop", unit, s.Conn.StopUnitContext)
}

func (s *DBusSystemd) Restart(ctx context.Context, unit string) error {
	if err := s.job(ctx, "restart", unit, s.Conn.RestartUnitContext); err != nil {
		return err
	}
	return s.wantActive(ctx, unit)
}

func (s *DBusSystemd) wantActive(ctx context.Context, unit string) error {
	state, err := s.ActiveState(ctx, unit)
	if err != nil {
		return err
	}
	if state != "active" {
		return fmt.Errorf("start %s: unit is %s after its start job (skipped by its ExecCondition, or it exited)", unit, state)
	}
	return nil
}

func (s *DBusSystemd) Enable(ctx context.Context, unit string) error {
	if _, _, err := s.Conn.EnableUnitFilesContext(ctx, []string{unit}, false, false); err != nil {
		return fmt.Errorf("enable %s: %w", unit, err)
	}
	return nil
}

func (s *DBusSystemd) Disable(ctx context.Context, unit string) error {
	if _, err := s.Conn.DisableUnitFilesContext(ctx, []string{unit}, false); err != nil {
		return fmt.Errorf("disable %s: %w", unit, err)
	}
	return nil
}

func (s *DBusSystemd) MaskRuntime(ctx context.Context, unit string) error {
	if _, err := s.Conn.MaskUnitFilesContext(ctx, []string{unit}, true, true); err != nil {
		return fmt.Errorf("mask %s: %w", unit, err)
	}
	return nil
}

func (s *DBusSystemd) UnmaskRuntime(ctx context.Context, unit string) error {
	if _, err := s.Conn.UnmaskUnitFilesContext(ctx, []string{unit}, true); err != nil {
		return fmt.Errorf("unmask %s: %w", unit, err)
	}
	return nil
}

func (s *DBusSystemd) Reload(ctx context.Context) error {
	if err := s.Conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	return nil
}

func (s *DBusSystemd) ActiveState(ctx context.Context, unit string) (string, error) {
	return s.unitProperty(ctx, unit, "ActiveState")
}

func (s *DBusSystemd) LoadState(ctx context.Context, unit string) (string, error) {
	return s.unitProperty(ctx, unit, "LoadState")
}

func (s *DBusSystemd) unitProperty(ctx context.Context, unit, name string) (string, error) {
	p, err := s.Conn.GetUnitPropertyContext(ctx, unit, name)
	if err != nil {
		return "", fmt.Errorf("%s of %s: %w", name, unit, err)
	}
	v, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("%s of %s: not a string: %v", name, unit, p.Value)
	}
	return v, nil
}

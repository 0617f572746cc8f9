package dbusdouble

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

func unitObjectPath(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9' && i > 0)
		if alnum {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return dbus.ObjectPath(unitPrefix + "/" + b.String())
}

func unitNameFromPath(p dbus.ObjectPath) string {
	s := path.Base(string(p))
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// managerObject is exported as org.freedesktop.systemd1.Manager.
type managerObject struct{ m *Manager }

type unitFileChange struct {
	Type        string
	Filename    string
	Destination string
}

// startable refuses a start of an unknown or masked unit, as systemd does.
func (o managerObject) startable(name string) *dbus.Error {
	u, derr := o.m.lookup(name)
	if derr != nil {
		return derr
	}
	o.m.mu.Lock()
	masked := u.maskedRuntime || u.maskedPersist
	o.m.mu.Unlock()
	if masked {
		return dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{fmt.Sprintf("Unit %s is masked.", name)})
	}
	return nil
}

func (o managerObject) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "StartUnit", Units: []string{name}})
	if derr := o.startable(name); derr != nil {
		return "", derr
	}
	return o.m.newJob(name, func() string { return o.m.start(name) }), nil
}

func (o managerObject) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "StopUnit", Units: []string{name}})
	if _, derr := o.m.lookup(name); derr != nil {
		return "", derr
	}
	return o.m.newJob(name, func() string { return o.m.stop(name) }), nil
}

func (o managerObject) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	o.m.record(Call{Method: "RestartUnit", Units: []string{name}})
	if derr := o.startable(name); derr != nil {
		return "", derr
	}
	return o.m.newJob(name, func() string {
		o.m.stop(name)
		return o.m.start(name)
	}), nil
}

// unitFiles records a unit-file call, then applies change to each file's
// unit under the manager's lock and collects the changes it reports; an
// unknown unit or a refusal ends the call with no changes.
func (o managerObject) unitFiles(method string, files []string, runtime bool, change func(u *unitState) (*unitFileChange, *dbus.Error)) ([]unitFileChange, *dbus.Error) {
	o.m.record(Call{Method: method, Units: files, Runtime: runtime})
	var changes []unitFileChange
	for _, f := range files {
		u, derr := o.m.lookup(filepath.Base(f))
		if derr != nil {
			return nil, derr
		}
		o.m.mu.Lock()
		c, derr := change(u)
		o.m.mu.Unlock()
		if derr != nil {
			return nil, derr
		}
		if c != nil {
			changes = append(changes, *c)
		}
	}
	return changes, nil
}

func (o managerObject) EnableUnitFiles(files []string, runtime, force bool) (bool, []unitFileChange, *dbus.Error) {
	changes, derr := o.unitFiles("EnableUnitFiles", files, runtime, func(u *unitState) (*unitFileChange, *dbus.Error) {
		if u.maskedRuntime || u.maskedPersist {
			return nil, dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{fmt.Sprintf("Unit file %s is masked.", u.Name)})
		}
		if u.enabled {
			return nil, nil
		}
		u.enabled = true
		return &unitFileChange{"symlink", "/etc/systemd/system/multi-user.target.wants/" + u.Name, "/etc/systemd/system/" + u.Name}, nil
	})
	return derr == nil, changes, derr
}

func (o managerObject) DisableUnitFiles(files []string, runtime bool) ([]unitFileChange, *dbus.Error) {
	return o.unitFiles("DisableUnitFiles", files, runtime, func(u *unitState) (*unitFileChange, *dbus.Error) {
		if !u.enabled {
			return nil, nil
		}
		u.enabled = false
		return &unitFileChange{"unlink", "/etc/systemd/system/multi-user.target.wants/" + u.Name, ""}, nil
	})
}

func (o managerObject) MaskUnitFiles(files []string, runtime, force bool) ([]unitFileChange, *dbus.Error) {
	return o.unitFiles("MaskUnitFiles", files, runtime, func(u *unitState) (*unitFileChange, *dbus.Error) {
		dir := "/etc/systemd/system/"
		if runtime {
			dir = "/run/systemd/system/"
			u.maskedRuntime = true
		} else {
			u.maskedPersist = true
		}
		return &unitFileChange{"symlink", dir + u.Name, "/dev/null"}, nil
	})
}

func (o managerObject) UnmaskUnitFiles(files []string, runtime bool) ([]unitFileChange, *dbus.Error) {
	return o.unitFiles("UnmaskUnitFiles", files, runtime, func(u *unitState) (*unitFileChange, *dbus.Error) {
		switch {
		case runtime && u.maskedRuntime:
			u.maskedRuntime = false
			return &unitFileChange{"unlink", "/run/systemd/system/" + u.Name, ""}, nil
		case !runtime && u.maskedPersist:
			u.maskedPersist = false
			return &unitFileChange{"unlink", "/etc/systemd/system/" + u.Name, ""}, nil
		}
		return nil, nil
	})
}

func (o managerObject) Reload() *dbus.Error {
	o.m.record(Call{Method: "Reload"})
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	o.m.reloadLocked()
	return nil
}

func (o managerObject) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	if _, derr := o.m.lookup(name); derr != nil {
		return "", derr
	}
	return unitObjectPath(name), nil
}

func (o managerObject) LoadUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	return unitObjectPath(name), nil
}

// unitProperties serves org.freedesktop.DBus.Properties on every unit path.
type unitProperties struct{ m *Manager }

func (p unitProperties) props(msg dbus.Message) map[string]dbus.Variant {
	objPath, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	name := unitNameFromPath(objPath)
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	u, ok := p.m.units[name]
	if !ok {
		// systemd answers for any unit name: one it has no file for is
		// not-found and inactive.
		return map[string]dbus.Variant{
			"Id": dbus.MakeVariant(name), "LoadState": dbus.MakeVariant("not-found"),
			"ActiveState": dbus.MakeVariant("inactive"), "SubState": dbus.MakeVariant("dead"),
			"UnitFileState": dbus.MakeVariant(""),
		}
	}
	load, file := "loaded", "disabled"
	if u.enabled {
		file = "enabled"
	}
	if u.maskedRuntime {
		load, file = "masked", "masked-runtime"
	}
	if u.maskedPersist {
		load, file = "masked", "masked"
	}
	sub := map[string]string{"active": "running", "inactive": "dead", "failed": "failed", "activating": "start", "deactivating": "stop"}[u.active]
	return map[string]dbus.Variant{
		"Id": dbus.MakeVariant(name), "LoadState": dbus.MakeVariant(load),
		"ActiveState": dbus.MakeVariant(u.active), "SubState": dbus.MakeVariant(sub),
		"UnitFileState": dbus.MakeVariant(file),
	}
}

func (p unitProperties) Get(msg dbus.Message, iface, prop string) (dbus.Variant, *dbus.Error) {
	if iface != unitIf {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	v, ok := p.props(msg)[prop]
	if !ok {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{prop})
	}
	return v, nil
}

func (p unitProperties) GetAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != unitIf && iface != "" {
		return map[string]dbus.Variant{}, nil
	}
	return p.props(msg), nil
}

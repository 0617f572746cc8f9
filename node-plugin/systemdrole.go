package nodeplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// systemdRole is the systemd role actuator once systemd answers over D-Bus
// and the server's start condition is installed. Until then (no D-Bus
// socket: a kubeadm host running the Systemd actuator, or systemd not up
// yet) it dials again at each use and says why it cannot act: the host is
// reported not provisioned (so a promote is refused with the cause and its
// remedy, and no swap picks it), any other step fails and is retried with
// the role reconciler's backoff, the guard acts on nothing. holdfast-node
// keeps running meanwhile: its fence agent and pre-staging need no systemd.
type systemdRole struct {
	state  hoststate.State
	unit   string
	remedy string
	// connect dials systemd and installs the start condition.
	connect func(ctx context.Context) (*actuator.Actuator, func(), error)

	mu      sync.Mutex
	act     *actuator.Actuator
	close   func()
	lastErr string
}

// newSystemdRole is the systemd role actuator of o; source says where the
// choice of Systemd came from, for the remedy. etcd tells it whether a
// promoted member joined, as it does the static pod actuator.
func newSystemdRole(o Options, state hoststate.State, source string, etcd actuator.Membership) *systemdRole {
	return &systemdRole{state: state, unit: o.ServerUnit,
		remedy: "holdfast-node runs the Systemd actuator (" + source + "): on a systemd host mount its D-Bus socket (the chart's node.dbusSocket); " +
			"on kubeadm set spec.host.actuator and the chart's node.actuator to StaticPod",
		connect: func(ctx context.Context) (*actuator.Actuator, func(), error) {
			var sd *actuator.DBusSystemd
			var err error
			if o.SystemdBus != "" {
				sd, err = actuator.NewDBusSystemdAt(o.SystemdBus)
			} else {
				sd, err = actuator.NewDBusSystemd(ctx)
			}
			if err != nil {
				return nil, nil, err
			}
			act := actuator.New(sd, actuator.Config{ServerUnit: o.ServerUnit, AgentUnit: o.AgentUnit, SystemdDir: o.SystemdDir, State: state,
				NodeName: o.NodeName, Members: etcd})
			if err := act.InstallStartCondition(ctx, StartConditionArgs(&o)); err != nil {
				sd.Conn.Close()
				return nil, nil, fmt.Errorf("installing the server's start condition: %w", err)
			}
			return act, func() { sd.Conn.Close() }, nil
		}}
}

// actuatorSource says where the choice of actuator comes from.
func actuatorSource(vp *holdfastv1.VoterPolicy) string {
	if vp == nil {
		return "--actuator, the chart's node.actuator, as no VoterPolicy " + holdfastv1.VoterPolicyName + " exists"
	}
	return "VoterPolicy " + holdfastv1.VoterPolicyName + " spec.host.actuator"
}

// get is the actuator, dialing systemd when it has none yet.
func (s *systemdRole) get(ctx context.Context) (*actuator.Actuator, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.act != nil {
		return s.act, nil
	}
	act, closeFn, err := s.connect(ctx)
	if err != nil {
		why := fmt.Sprintf("no systemd to switch the host's role with (%v); %s", err, s.remedy)
		if why != s.lastErr {
			klog.FromContext(ctx).Error(err, "No systemd to switch the host's role with: retried at each report and role step", "remedy", s.remedy)
			s.lastErr = why
		}
		return nil, fmt.Errorf("%s", why)
	}
	klog.FromContext(ctx).Info("Connected to systemd; the server's start condition is installed")
	s.act, s.close, s.lastErr = act, closeFn, ""
	return act, nil
}

// Close closes the systemd connection, if any.
func (s *systemdRole) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.close != nil {
		s.close()
	}
}

// Provisioned is false while systemd does not answer.
func (s *systemdRole) Provisioned(ctx context.Context) (bool, error) {
	act, err := s.get(ctx)
	if err != nil {
		return false, nil
	}
	return act.Provisioned(ctx)
}

// NotProvisioned says why the host is not provisioned: systemd's absence,
// with its remedy, or the server unit not installed.
func (s *systemdRole) NotProvisioned() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.act == nil {
		return s.lastErr, nil
	}
	return fmt.Sprintf("host not provisioned: server unit %s is not installed", s.unit), nil
}

// ActiveRole is unknown while systemd does not answer: the reporter falls
// back to the role file.
func (s *systemdRole) ActiveRole(ctx context.Context) (string, error) {
	act, err := s.get(ctx)
	if err != nil {
		return "", nil
	}
	return act.ActiveRole(ctx)
}

func (s *systemdRole) Promote(ctx context.Context, join string) (time.Time, error) {
	act, err := s.get(ctx)
	if err != nil {
		return time.Time{}, &actuator.RefusedError{Reason: err.Error()}
	}
	return act.Promote(ctx, join)
}

func (s *systemdRole) StepDown(ctx context.Context) error {
	act, err := s.get(ctx)
	if err != nil {
		return err
	}
	return act.StepDown(ctx)
}

func (s *systemdRole) FinishDemote(ctx context.Context) error {
	act, err := s.get(ctx)
	if err != nil {
		return err
	}
	return act.FinishDemote(ctx)
}

func (s *systemdRole) Rollback(ctx context.Context) error {
	act, err := s.get(ctx)
	if err != nil {
		return err
	}
	return act.Rollback(ctx)
}

// Guard judges the host files while systemd does not answer, and masks or
// stops nothing: there is no unit manager to ask, and the server's start
// condition, once installed, judges every start.
func (s *systemdRole) Guard(ctx context.Context) (bool, string, error) {
	act, err := s.get(ctx)
	if err != nil {
		return s.state.ServerAllowed()
	}
	return act.Guard(ctx)
}

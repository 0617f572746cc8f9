package nodeplugin

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
)

// actuatorSettings are VoterPolicy spec.host's choice of actuator and, for
// StaticPod, its kubeadm layout. They come from the policy once it exists:
// one etcd cluster has one topology, so no node's flag may differ. Before,
// the chart's node.actuator (--actuator) says which the host runs.
type actuatorSettings struct {
	Actuator                                           string
	EtcdImage, ManifestsDir, PKIDir, APIServerTemplate string
}

// resolveActuator is actuatorSettings for the VoterPolicy vp; while none
// exists (vp nil) the actuator is flag, the chart's node.actuator (empty:
// Systemd), with no kubeadm layout: a host is then never promoted, and it
// runs the actuator whose host paths the chart mounts.
func resolveActuator(flag string, vp *holdfastv1.VoterPolicy) actuatorSettings {
	s := actuatorSettings{Actuator: holdfastv1.ActuatorSystemd}
	if vp == nil {
		if flag != "" {
			s.Actuator = flag
		}
		return s
	}
	if vp.Spec.Host.Actuator != "" {
		s.Actuator = vp.Spec.Host.Actuator
	}
	if sp := vp.Spec.Host.StaticPod; sp != nil {
		s.EtcdImage, s.ManifestsDir, s.PKIDir, s.APIServerTemplate = sp.EtcdImage, sp.ManifestsDir, sp.PKIDir, sp.APIServerTemplate
	}
	return s
}

// newStaticPodActuator is the role actuator of a kubeadm host: it reads the
// kubelet's mirror pods from the apiserver past the cache, asks etcd
// whether a promoted member joined, and the etcd pod it writes runs the
// host's start condition before etcd, as the systemd unit's ExecCondition
// does.
func newStaticPodActuator(mgr ctrl.Manager, o *Options, s actuatorSettings, state hoststate.State, etcd actuator.Membership) (*actuator.StaticPodActuator, error) {
	if err := installHostBinary(o.HostDir); err != nil {
		return nil, fmt.Errorf("copying holdfast-node to the host for the etcd pod's start condition: %w", err)
	}
	return actuator.NewStaticPod(actuator.APIMirrorPods{Reader: mgr.GetAPIReader()}, actuator.StaticPodConfig{
		NodeName: o.NodeName, ManifestsDir: s.ManifestsDir, PKIDir: s.PKIDir, APIServerTemplate: s.APIServerTemplate, KubeletKubeconfig: o.KubeletKubeconfig,
		EtcdImage: s.EtcdImage, StartCondition: StartConditionArgs(o), State: state, Members: etcd, Clock: clock.RealClock{},
	}), nil
}

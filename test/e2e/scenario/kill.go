package scenario

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/test/cluster"
)

// candidacy is the line client-go's elector logs when a replica stands for
// an election; controller-runtime starts the election only once the
// replica's caches have synced, so from then on it is a warm standby.
const candidacy = "Attempting to acquire leader lease"

// grantorCandidacies counts the grantor-election candidacies in a log.
func grantorCandidacies(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, candidacy) && strings.Contains(line, cluster.HoldfastNamespace+"/"+GrantorElection) {
			n++
		}
	}
	return n
}

// ArmControllerKill readies a SIGKILL of the i-th units-role replica
// (ControllerList's order) and returns it, for a drill that kills at an
// instant it picks: whatever can be looked up is looked up now, so the
// kill itself is one signal. The killed replica stays down until
// RestartAsCandidate.
//
// Installed by the chart, the signal goes to the container's process on
// its node (as the kernel's OOM killer would send it), and the pod is then
// deleted at once with no grace, so its Deployment starts the replica
// again as a new pod. A container restarted in place would come back with
// the same identity (the pod's name) and could take the election back
// itself: a drill could not tell the hand-over to the other replica from
// the killed one's return, and its kubelet's restart back-off (10 s
// doubling to 5 min) would outlast a drill that kills twenty times.
func (w *World) ArmControllerKill(ctx context.Context, i int) (kill func(), err error) {
	ctls := w.ControllerList()
	if i >= len(ctls) {
		return nil, fmt.Errorf("units-role replica %d: only %d run", i, len(ctls))
	}
	if w.install != Chart {
		return func() {
			w.mu.Lock()
			w.ctlBusy[i] = true
			c := w.Controllers[i]
			w.mu.Unlock()
			c.Kill()
		}, nil
	}
	var p corev1.Pod
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: ctls[i].Identity}, &p); err != nil {
		return nil, err
	}
	pid, err := w.Nodes[p.Spec.NodeName].ContainerPID(ctx, p.Namespace, p.Name, "controller")
	if err != nil {
		return nil, err
	}
	var others []string
	for _, c := range ctls {
		if c.Identity != p.Name {
			others = append(others, c.Identity)
		}
	}
	return func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			w.logf("kill %s (pid %d): %v", p.Name, pid, err)
		}
		deleted := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			deleted <- client.IgnoreNotFound(w.Client.Delete(ctx, &p, client.GracePeriodSeconds(0)))
		}()
		w.mu.Lock()
		if w.killed == nil {
			w.killed = map[int]killedPod{}
		}
		w.killed[i] = killedPod{name: p.Name, survivors: others, deleted: deleted}
		w.mu.Unlock()
	}, nil
}

// killedPod is a chart pod a drill killed: its name, the units-role pods
// that ran beside it, and its deletion's outcome.
type killedPod struct {
	name      string
	survivors []string
	deleted   chan error
}

// RestartAsCandidate starts the i-th units-role replica again after its
// armed kill and waits until it stands for the grantor's election (a
// candidacy in its log), so a next kill has a warm standby. Installed by
// the chart, it waits for the pod the Deployment starts in the killed
// one's place.
func (w *World) RestartAsCandidate(ctx context.Context, i int) error {
	if w.install == Chart {
		return w.replacedAsCandidate(ctx, i)
	}
	c := w.ControllerList()[i]
	before := grantorCandidacies(readLog(c.Log()))
	if err := w.RestartController(ctx, i); err != nil {
		return err
	}
	c = w.ControllerList()[i]
	if err := cluster.Poll(ctx, 2*time.Minute, func() (bool, error) { return grantorCandidacies(readLog(c.Log())) > before, nil }); err != nil {
		return fmt.Errorf("%s did not stand for the grantor's election again: %w\n%s", c.Identity, err, c.Tail(20))
	}
	return nil
}

func readLog(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// replacedAsCandidate waits until the pod the units role's Deployment
// starts in place of the i-th replica's killed pod is ready and stands for
// the grantor's election.
func (w *World) replacedAsCandidate(ctx context.Context, i int) error {
	w.mu.Lock()
	k, ok := w.killed[i]
	delete(w.killed, i)
	w.mu.Unlock()
	if !ok {
		return fmt.Errorf("units-role replica %d was not killed", i)
	}
	if err := <-k.deleted; err != nil {
		return fmt.Errorf("deleting the killed pod %s: %w", k.name, err)
	}
	cs, err := kubernetes.NewForConfig(w.Config)
	if err != nil {
		return err
	}
	var last string
	err = cluster.Poll(ctx, 3*time.Minute, func() (bool, error) {
		pods, err := w.componentPods(ctx, chartUnitsComponent)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, p := range pods {
			if p.Name == k.name || slices.Contains(k.survivors, p.Name) || !p.DeletionTimestamp.IsZero() {
				continue
			}
			if !podReady(&p) {
				last = p.Name + " not ready"
				return false, nil
			}
			log, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "controller"}).DoRaw(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = p.Name + " ready, no candidacy logged yet"
			return grantorCandidacies(string(log)) > 0, nil
		}
		last = "no pod in place of " + k.name
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the units role's Deployment did not start a replica in place of %s standing for the grantor's election (%s): %w", k.name, last, err)
	}
	return nil
}

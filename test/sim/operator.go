package sim

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// operator is a plant operator at kubectl, a cluster admin: every request
// goes through the apiserver and the real webhook, and a refused one
// changes nothing.
type operator struct {
	s    *Sim
	p    *proc
	spec holdfastv1.UnitSpec
	reqs int
	// written is the last fence confirmation the operator wrote, applied
	// the last one the apiserver took: a GitOps tool keeps either in its
	// copy of the Unit and applies it again.
	applied, written map[string]string
}

var admin = user{name: "plant-operator", groups: []string{"system:masters"}}

func (o *operator) say(format string, args ...any) {
	o.s.log(o.p.host, unitKey_, kFault, "operator: "+format, args...)
}

// create creates the unit with spec.
func (o *operator) create(spec holdfastv1.UnitSpec) { o.createTry(spec, false) }

// recreate creates the unit with spec as a GitOps tool does: again every
// few seconds while the name is still taken (a deletion in progress).
func (o *operator) recreate(spec holdfastv1.UnitSpec) { o.createTry(spec, true) }

func (o *operator) createTry(spec holdfastv1.UnitSpec, retry bool) {
	o.spec = spec
	u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: unitName}, Spec: spec}
	o.s.call(o.p, func(a *apiserver) (client.Object, error) { return a.create(admin, u) }, func(r apiResult) {
		switch {
		case r.err == nil:
			o.say("created unit %s (%s)", unitKey_, describe(spec.Availability))
		case retry && apierrors.IsAlreadyExists(r.err):
			o.s.after(o.p, 3*time.Second, func() { o.createTry(spec, true) })
		default:
			o.say("create refused: %v", short(r.err))
		}
	})
}

// edit reads the unit, changes it with change (false: nothing to do) and
// writes it back conditioned on what it read, once more on a conflict.
func (o *operator) edit(what string, change func(u *holdfastv1.Unit) bool) {
	o.editTry(what, change, nil, 2)
}

// editTry is edit, calling admitted once the apiserver took the change.
func (o *operator) editTry(what string, change func(u *holdfastv1.Unit) bool, admitted func(), tries int) {
	s := o.s
	s.call(o.p, func(a *apiserver) (client.Object, error) {
		cur, ok := a.st.get("Unit", unitNS, unitName)
		if !ok {
			return nil, notFound("Unit", unitName)
		}
		return cur, nil
	}, func(r apiResult) {
		if r.err != nil {
			o.say("%s: could not read the unit: %v", what, short(r.err))
			return
		}
		u := r.obj.(*holdfastv1.Unit)
		if !change(u) {
			o.say("%s: nothing to do", what)
			return
		}
		s.call(o.p, func(a *apiserver) (client.Object, error) { return a.update(admin, u, "") }, func(r apiResult) {
			switch {
			case r.err == nil:
				o.say("%s: done", what)
				if admitted != nil {
					admitted()
				}
			case apierrors.IsConflict(r.err) && tries > 1:
				o.editTry(what, change, admitted, tries-1)
			default:
				o.say("%s: refused: %v", what, short(r.err))
			}
		})
	})
}

// remove deletes the unit.
func (o *operator) remove() {
	o.s.call(o.p, func(a *apiserver) (client.Object, error) {
		cur, ok := a.st.get("Unit", unitNS, unitName)
		if !ok {
			return nil, notFound("Unit", unitName)
		}
		return nil, a.remove(cur, false)
	}, func(r apiResult) {
		if r.err != nil {
			o.say("delete failed: %v", short(r.err))
			return
		}
		o.say("deleted unit %s", unitKey_)
	})
}

// failover asks for a manual failover to target, with a fence confirmation
// when confirm is not empty.
func (o *operator) failover(target, confirm string) {
	o.reqs++
	id := fmt.Sprintf("req-%d", o.reqs)
	what := fmt.Sprintf("failover to %s", target)
	if confirm != "" {
		what += " (confirmed fenced: " + confirm + ")"
	}
	var written map[string]string
	o.editTry(what, func(u *holdfastv1.Unit) bool {
		if u.Annotations == nil {
			u.Annotations = map[string]string{}
		}
		u.Annotations[holdfastv1.AnnotationFailoverTo] = target
		u.Annotations[holdfastv1.AnnotationRequestID] = id
		if b := u.Status.RuntimeBinding; confirm != "" && b != nil {
			// The certification is of the runtime the operator reads: its
			// epoch, and its process as the apiserver has its pod now.
			written = policy.ConfirmFenced(confirm, b.Epoch, o.running(b))
			written[holdfastv1.AnnotationRequestID] = id
			for k, v := range written {
				u.Annotations[k] = v
			}
			o.written = written
		} else {
			delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmFenced)
			delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmEpoch)
			delete(u.Annotations, holdfastv1.AnnotationFailoverConfirmIncarnation)
		}
		return true
	}, func() {
		if written != nil {
			o.applied = written
		}
	}, 2)
}

// running is the process of the binding's runtime pod as the apiserver
// has it (nil: no pod), as kubectl holdfast reads it.
func (o *operator) running(b *holdfastv1.RuntimeBinding) *holdfastv1.RuntimeIncarnation {
	if b.Pod == "" {
		return nil
	}
	p, ok := o.s.api.st.get("Pod", unitNS, b.Pod)
	if !ok {
		return nil
	}
	return policy.IncarnationOf(p.(*corev1.Pod))
}

// restart asks for a restart of the Hold, now by the operator's clock.
func (o *operator) restart() {
	at := o.p.clock().Now().UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
	o.edit("restart at "+at, func(u *holdfastv1.Unit) bool {
		if u.Annotations == nil {
			u.Annotations = map[string]string{}
		}
		u.Annotations[holdfastv1.AnnotationRestart] = at
		return true
	})
}

func describe(a holdfastv1.Availability) string {
	m := "default"
	if a.RebindMarginSeconds != nil {
		m = fmt.Sprintf("%ds", *a.RebindMarginSeconds)
	}
	return fmt.Sprintf("mode %s, lease %ds, grace %ds, margin %s", a.Mode, a.LeaseDurationSeconds, a.RuntimeStartupGraceSeconds, m)
}

func short(err error) string {
	s := err.Error()
	if i := strings.Index(s, "\n"); i > 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// reapply is a GitOps tool applying its copy of the Unit again: the last
// fence confirmation the operator wrote (committed, whether or not the
// apiserver took it then) or the last one it applied (consumed since)
// comes back, certifying a runtime that may no longer be stopped.
func (o *operator) reapply(written bool) {
	stale := o.applied
	if written {
		stale = o.written
	}
	if stale == nil {
		o.say("re-apply: no confirmation to apply again")
		return
	}
	o.edit("re-apply of the confirmation of epoch "+stale[holdfastv1.AnnotationFailoverConfirmEpoch], func(u *holdfastv1.Unit) bool {
		if u.Annotations == nil {
			u.Annotations = map[string]string{}
		}
		for k, v := range stale {
			u.Annotations[k] = v
		}
		return true
	})
}

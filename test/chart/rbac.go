package chart

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditPolicy records, at Metadata level, every request of holdfast's service
// accounts in the release namespace and nothing else.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:` + Namespace + `"]
  - level: None
`

// Grant is one permission a chart role gives: a verb on a resource (with
// subresource, as "pods/binding"), in a namespace ("" is every namespace) and
// optionally only on named objects.
type Grant struct {
	Role      string
	Verb      string
	Group     string
	Resource  string
	Namespace string
	Name      string
}

func (g Grant) String() string {
	s := fmt.Sprintf("%s %s", g.Verb, g.Resource)
	if g.Group != "" {
		s += "." + g.Group
	}
	if g.Name != "" {
		s += "/" + g.Name
	}
	if g.Namespace != "" {
		s += " in " + g.Namespace
	}
	return s + " (" + g.Role + ")"
}

// Bound are the grants the chart gives a service account, and the roles it
// binds that the chart does not define (Kubernetes' bootstrap roles).
type Bound struct {
	Grants  []Grant
	Foreign []string
	// Wildcards lists rules with a '*': never least privilege.
	Wildcards []string
}

// Grants reads the rendered chart's RBAC for the service account ns/name.
func Grants(ms []Manifest, ns, name string) (Bound, error) {
	roles := map[string]rbacv1.ClusterRole{} // "ClusterRole/x" or "Role/ns/x"
	var bindings []rbacv1.RoleBinding
	for _, m := range ms {
		data, err := json.Marshal(m.Object)
		if err != nil {
			return Bound{}, err
		}
		switch m.Kind {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole
			if err := json.Unmarshal(data, &r); err != nil {
				return Bound{}, err
			}
			key := "ClusterRole/" + m.Name
			if m.Kind == "Role" {
				key = "Role/" + m.Namespace + "/" + m.Name
			}
			roles[key] = r
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := json.Unmarshal(data, &b); err != nil {
				return Bound{}, err
			}
			bindings = append(bindings, b)
		}
	}
	var out Bound
	for _, b := range bindings {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == name && s.Namespace == ns
		}) {
			continue
		}
		key := "ClusterRole/" + b.RoleRef.Name
		if b.RoleRef.Kind == "Role" {
			key = "Role/" + b.Namespace + "/" + b.RoleRef.Name
		}
		r, ok := roles[key]
		if !ok {
			out.Foreign = append(out.Foreign, key)
			continue
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
				out.Wildcards = append(out.Wildcards, fmt.Sprintf("%s: %v", key, rule))
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						for _, n := range names {
							out.Grants = append(out.Grants, Grant{Role: key, Verb: v, Group: g, Resource: res, Namespace: b.Namespace, Name: n})
						}
					}
				}
			}
		}
	}
	sort.Strings(out.Foreign)
	return out, nil
}

// Request is one API request the audit log recorded.
type Request struct {
	Verb, Group, Resource, Namespace, Name string
	Code                                   int32
	// Authorized: the authorizer allowed it (a 403 then came from
	// admission, such as a write into a terminating namespace).
	Authorized bool
}

// refused reports whether the authorizer refused the request.
func (r Request) refused() bool { return r.Code == 403 && !r.Authorized }

func (r Request) String() string {
	s := fmt.Sprintf("%s %s", r.Verb, r.Resource)
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Namespace != "" {
		s += " " + r.Namespace + "/" + r.Name
	} else if r.Name != "" {
		s += " " + r.Name
	}
	return fmt.Sprintf("%s -> %d", s, r.Code)
}

// Covers reports whether the grant is what allowed the request.
func (g Grant) Covers(r Request) bool {
	return g.Verb == r.Verb && g.Group == r.Group && g.Resource == r.Resource &&
		(g.Namespace == "" || g.Namespace == r.Namespace) && (g.Name == "" || g.Name == r.Name)
}

// Requests reads the resource requests user made from an audit log.
func Requests(path, user string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.User.Username != user || ev.ObjectRef == nil || ev.Stage == auditv1.StageResponseStarted {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		r := Request{Verb: ev.Verb, Group: ev.ObjectRef.APIGroup, Resource: res, Namespace: ev.ObjectRef.Namespace, Name: ev.ObjectRef.Name}
		if ev.ResponseStatus != nil {
			r.Code = ev.ResponseStatus.Code
		}
		r.Authorized = ev.Annotations["authorization.k8s.io/decision"] == "allow"
		out = append(out, r)
	}
	return out, sc.Err()
}

// Judge compares what a component did with what the chart grants it: every
// request was allowed (no 403), and every grant allowed at least one request.
func Judge(b Bound, reqs []Request) (denied []Request, unused []Grant) {
	for _, r := range reqs {
		if r.refused() {
			denied = append(denied, r)
		}
	}
	for _, g := range b.Grants {
		if !slices.ContainsFunc(reqs, func(r Request) bool { return !r.refused() && g.Covers(r) }) {
			unused = append(unused, g)
		}
	}
	return denied, unused
}

// Describe lists requests compactly, deduplicated, for failure messages.
func Describe[T fmt.Stringer](items []T) string {
	seen := map[string]bool{}
	var lines []string
	for _, it := range items {
		if s := it.String(); !seen[s] {
			seen[s] = true
			lines = append(lines, "  "+s)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

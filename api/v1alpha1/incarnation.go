package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// RuntimeContainer is the name of the runtime container in a runtime
	// pod: its restart count is the incarnation's.
	RuntimeContainer = "runtime"
	// IncarnationNone is the AnnotationFailoverConfirmIncarnation value of
	// a confirmation made while the binding had no runtime pod.
	IncarnationNone = "none"
)

// String is the incarnation as AnnotationFailoverConfirmIncarnation spells
// it: "<pod UID>/<restart count>".
func (i RuntimeIncarnation) String() string {
	return i.PodUID + "/" + strconv.FormatInt(int64(i.RestartCount), 10)
}

// ParseIncarnation reads an AnnotationFailoverConfirmIncarnation value:
// "<pod UID>/<restart count>", or IncarnationNone (nil).
func ParseIncarnation(v string) (*RuntimeIncarnation, error) {
	if v == IncarnationNone {
		return nil, nil
	}
	uid, count, ok := strings.Cut(v, "/")
	n, err := strconv.ParseInt(count, 10, 32)
	if !ok || uid == "" || strings.ContainsAny(uid, "/ ") || err != nil || n < 0 || strconv.FormatInt(n, 10) != count {
		return nil, fmt.Errorf("%q is neither <pod UID>/<restart count> nor %q", v, IncarnationNone)
	}
	return &RuntimeIncarnation{PodUID: uid, RestartCount: int32(n)}, nil
}

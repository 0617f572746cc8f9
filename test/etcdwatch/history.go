package etcdwatch

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one operation of a client's history: a put or a get of one key,
// when it was called and when it returned (from the history's start), and
// what it returned. A put whose outcome the client never learned (an error,
// a timeout) is Unknown: it may have taken effect at any instant after its
// call, or never. A get that failed observed nothing and is not recorded.
type Op struct {
	Put          bool
	Key          string
	Value        string
	Found        bool // get: the key existed, holding Value
	Unknown      bool
	Call, Return time.Duration
}

func (o Op) String() string {
	if o.Put {
		s := fmt.Sprintf("put(%s, %s)", o.Key, o.Value)
		if o.Unknown {
			s += " -> unknown"
		}
		return s
	}
	if !o.Found {
		return fmt.Sprintf("get(%s) -> absent", o.Key)
	}
	return fmt.Sprintf("get(%s) -> %s", o.Key, o.Value)
}

// History is a client's operations against etcd, in any order.
type History []Op

// absent is a register's state before any put.
const absent = "\x00absent"

// kvModel is a key-value store whose every key is a register: a get
// returns the value of the last put linearized before it. The history is
// checked key by key (linearizability is local: a history is linearizable
// exactly when each key's is).
var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, o := range h {
			k := o.Input.(Op).Key
			byKey[k] = append(byKey[k], o)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, len(keys))
		for i, k := range keys {
			out[i] = byKey[k]
		}
		return out
	},
	Init: func() any { return absent },
	Step: func(state, input, _ any) (bool, any) {
		o := input.(Op)
		if o.Put {
			return true, o.Value
		}
		if !o.Found {
			return state == absent, state
		}
		return state == o.Value, state
	},
	DescribeOperation: func(input, _ any) string { return input.(Op).String() },
	DescribeState: func(state any) string {
		if state == absent {
			return "absent"
		}
		return state.(string)
	},
}

// checkTimeout bounds one check; a swap's history is thousands of
// operations over keys written once each, which porcupine checks in
// milliseconds.
const checkTimeout = time.Minute

// Linearizable checks h against kvModel with porcupine (the checker etcd's
// robustness tests use). It returns nil when h is linearizable, and
// otherwise an error naming the first key whose operations are not, with
// a visualization of the history written to a file.
func Linearizable(h History) error {
	res, info := porcupine.CheckOperationsVerbose(kvModel, h.operations(), checkTimeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("the linearizability check of %d operations did not finish within %v", len(h), checkTimeout)
	}
	msg := fmt.Sprintf("history of %d operations is not linearizable: %s", len(h), firstBadKey(h))
	if f, err := os.CreateTemp("", "holdfast-history-*.html"); err == nil {
		if porcupine.Visualize(kvModel, info, f) == nil {
			msg += "; visualization in " + f.Name()
		}
		_ = f.Close()
	}
	return fmt.Errorf("%s", msg)
}

// firstBadKey names the first key, in order, whose own operations are not
// linearizable, with them.
func firstBadKey(h History) string {
	byKey := map[string]History{}
	for _, o := range h {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops := byKey[k]
		if !porcupine.CheckOperations(kvModel, ops.operations()) {
			sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
			var parts []string
			for _, o := range ops {
				ret := fmt.Sprintf("%.3fs", o.Return.Seconds())
				if o.Unknown {
					ret = "never"
				}
				parts = append(parts, fmt.Sprintf("%s [%.3fs, %s]", o, o.Call.Seconds(), ret))
			}
			return fmt.Sprintf("key %s: %s", k, strings.Join(parts, ", "))
		}
	}
	return "no single key is to blame"
}

// operations is h as porcupine reads it.
func (h History) operations() []porcupine.Operation {
	ops := make([]porcupine.Operation, len(h))
	for i, o := range h {
		ret := int64(o.Return)
		if o.Unknown {
			// Its effect may come at any later instant, or never: a put
			// linearized last is indistinguishable from one that never
			// happened.
			ret = math.MaxInt64
		}
		ops[i] = porcupine.Operation{Input: o, Call: int64(o.Call), Output: o, Return: ret}
	}
	return ops
}

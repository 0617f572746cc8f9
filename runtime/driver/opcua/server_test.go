package opcua_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"

	"github.com/holdfast-io/holdfast/test/ports"
)

// plant is the address space the test servers serve: gopcua's own OPC UA
// server on loopback, its writes logged in order by the namespace. It
// outlives a server, so a restarted server serves the values the last one
// held.
type plant struct {
	port int
	opts []server.Option

	mu        sync.Mutex
	values    map[string]any // by node name, with its OPC UA type
	writes    []written
	reads     int
	failReads map[string]bool

	srv *server.Server
	ns  *loggingNamespace
}

type written struct {
	Node  string
	Value int64
}

// startPlant serves variables named as in values (ns=N;s=NAME) on a free
// loopback port with the security and identities opts enable; without
// opts, security None and anonymous sessions.
func startPlant(t *testing.T, values map[string]any, opts ...server.Option) *plant {
	t.Helper()
	ps, err := ports.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	p := &plant{port: ps[0], values: values, failReads: map[string]bool{}, opts: opts}
	p.start(t)
	t.Cleanup(p.stop)
	return p
}

func (p *plant) start(t *testing.T) {
	t.Helper()
	opts := p.opts
	if len(opts) == 0 {
		opts = []server.Option{
			server.EnableSecurity("None", ua.MessageSecurityModeNone),
			server.EnableAuthMode(ua.UserTokenTypeAnonymous),
		}
	}
	opts = append([]server.Option{server.EndPoint("127.0.0.1", p.port)}, opts...)
	srv := server.New(opts...)
	// NewNodeNameSpace registers itself; the logging wrapper is registered
	// after it, takes the next namespace index, and serves every node.
	ns := &loggingNamespace{NodeNameSpace: server.NewNodeNameSpace(srv, "urn:holdfast:test:plant"), plant: p}
	srv.AddNamespace(ns)
	p.mu.Lock()
	for name, v := range p.values {
		ns.AddNewVariableStringNode(name, v)
	}
	p.srv, p.ns = srv, ns
	p.mu.Unlock()
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (p *plant) stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// node is the node ID text of the variable called name.
func (p *plant) node(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("ns=%d;s=%s", p.ns.ID(), name)
}

func (p *plant) url(query string) string {
	return "opcua://127.0.0.1:" + strconv.Itoa(p.port) + "?" + query
}

func (p *plant) log() []written {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]written(nil), p.writes...)
}

func (p *plant) readsServed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

func (p *plant) setFailReads(name string, fail bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failReads[name] = fail
}

// set changes a value on the server, as the plant's own logic would.
func (p *plant) set(name string, v any) {
	p.mu.Lock()
	ns := p.ns
	p.values[name] = v
	p.mu.Unlock()
	ns.SetAttribute(ua.NewStringNodeID(ns.ID(), name), ua.AttributeIDValue, server.DataValueFromValue(v))
	// set is not a client's write: drop it from the log.
	p.mu.Lock()
	p.writes = p.writes[:len(p.writes)-1]
	p.mu.Unlock()
}

func (p *plant) value(name string) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.values[name]
}

// loggingNamespace logs every value written, keeps the plant's values for
// the next server, and fails reads of the nodes the plant says.
type loggingNamespace struct {
	*server.NodeNameSpace
	plant *plant
}

func (l *loggingNamespace) SetAttribute(id *ua.NodeID, attr ua.AttributeID, val *ua.DataValue) ua.StatusCode {
	st := l.NodeNameSpace.SetAttribute(id, attr, val)
	if attr == ua.AttributeIDValue && st == ua.StatusOK {
		p := l.plant
		p.mu.Lock()
		name := id.StringID()
		w := written{Node: name}
		switch x := val.Value.Value().(type) {
		case uint16:
			w.Value = int64(x)
		case int64:
			w.Value = x
		case int32:
			w.Value = int64(x)
		case uint32:
			w.Value = int64(x)
		}
		p.writes = append(p.writes, w)
		p.values[name] = val.Value.Value()
		p.mu.Unlock()
	}
	return st
}

func (l *loggingNamespace) Attribute(id *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
	if attr == ua.AttributeIDValue {
		p := l.plant
		p.mu.Lock()
		p.reads++
		fail := p.failReads[id.StringID()]
		p.mu.Unlock()
		if fail {
			return &ua.DataValue{EncodingMask: ua.DataValueStatusCode, Status: ua.StatusBadNotReadable}
		}
	}
	return l.NodeNameSpace.Attribute(id, attr)
}

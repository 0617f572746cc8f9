package devicesim

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
)

// The OPC UA device (Config.Protocol OPCUA) is an OPC UA server (gopcua's,
// security None, anonymous sessions) serving the same holding registers
// as variables, and the same write log. Its own namespace is index 1:
//   - ns=1;s=HR<n> is holding register n, a UInt16 (OPCUANode);
//   - ns=1;s=OwnerEpoch is the owner-epoch node, an Int64, in OwnerEpoch
//     mode only (OPCUAEpochNode). A client declares its epoch by writing
//     it; a declaration lower than the highest epoch seen is refused, and
//     so is every other write on a connection whose declared epoch is
//     behind the highest (Bad_UserAccessDenied), as the Modbus device's
//     owner-epoch block does. A Plain device has no such node.
//
// The Read and Write services are the device's own, so a write is logged
// with its connection's peer (host:port), which gopcua's namespaces do not
// see. Every write of a variable is logged, accepted or refused; accepted
// declarations are not, as on the Modbus device.

// OPCUANamespace is the URI of the OPC UA device's namespace, index 1.
const OPCUANamespace = "urn:holdfast:device-simulator"

// OPCUAEpochNode is the OPC UA device's owner-epoch node (OwnerEpoch mode).
const OPCUAEpochNode = "ns=1;s=OwnerEpoch"

// OPCUANode is the node ID of holding register reg on the OPC UA device.
func OPCUANode(reg uint16) string { return fmt.Sprintf("ns=1;s=HR%d", reg) }

const epochNodeName = "OwnerEpoch"

// startOPCUA serves the device's registers over OPC UA at addr.
func (s *Sim) startOPCUA(addr string) error {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("port %q: %w", portText, err)
	}
	srv := server.New(
		server.EndPoint(host, port),
		server.EnableSecurity("None", ua.MessageSecurityModeNone),
		server.EnableAuthMode(ua.UserTokenTypeAnonymous),
		server.ProductName("holdfast device-simulator"),
	)
	// The namespace gives the server's namespace array index 1; its nodes
	// are served by the handlers below, which take the services over
	// before Start registers gopcua's own.
	server.NewNodeNameSpace(srv, OPCUANamespace)
	srv.RegisterHandler(id.ReadRequest_Encoding_DefaultBinary, func(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
		return s.opcuaRead(srv, r)
	})
	srv.RegisterHandler(id.WriteRequest_Encoding_DefaultBinary, func(sc *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
		return s.opcuaWrite(srv, sc.RemoteAddr().String(), r)
	})
	if err := srv.Start(context.Background()); err != nil {
		return err
	}
	s.stop = srv.Close
	return nil
}

// opcuaNode is the register a node of the device's namespace names, or
// epoch true for the owner-epoch node; ok false for any other node.
func (s *Sim) opcuaNode(n *ua.NodeID) (reg uint16, epoch, ok bool) {
	if n.Namespace() != 1 || n.Type() != ua.NodeIDTypeString {
		return 0, false, false
	}
	name := n.StringID()
	if name == epochNodeName {
		return 0, true, s.cfg.Mode == OwnerEpoch
	}
	r, err := strconv.ParseUint(strings.TrimPrefix(name, "HR"), 10, 16)
	if !strings.HasPrefix(name, "HR") || err != nil {
		return 0, false, false
	}
	return uint16(r), false, true
}

func (s *Sim) opcuaRead(srv *server.Server, r ua.Request) (ua.Response, error) {
	req, ok := r.(*ua.ReadRequest)
	if !ok {
		return nil, fmt.Errorf("read service: request %T", r)
	}
	results := make([]*ua.DataValue, len(req.NodesToRead))
	served := false
	s.mu.Lock()
	for i, n := range req.NodesToRead {
		if n.NodeID.Namespace() != 1 {
			results[i] = serverAttribute(srv, n.NodeID, n.AttributeID)
			continue
		}
		reg, epoch, known := s.opcuaNode(n.NodeID)
		switch {
		case !known:
			results[i] = statusValue(ua.StatusBadNodeIDUnknown)
		case n.AttributeID != ua.AttributeIDValue:
			results[i] = statusValue(ua.StatusBadAttributeIDInvalid)
		case s.readsFail:
			results[i] = statusValue(ua.StatusBadNotReadable)
		case epoch:
			results[i], served = server.DataValueFromValue(s.highest), true
		default:
			results[i], served = server.DataValueFromValue(s.regs[reg]), true
		}
	}
	if served {
		s.readsServed++
	}
	s.mu.Unlock()
	return &ua.ReadResponse{ResponseHeader: responseHeader(req.RequestHeader), Results: results}, nil
}

func (s *Sim) opcuaWrite(srv *server.Server, peer string, r ua.Request) (ua.Response, error) {
	req, ok := r.(*ua.WriteRequest)
	if !ok {
		return nil, fmt.Errorf("write service: request %T", r)
	}
	status := make([]ua.StatusCode, len(req.NodesToWrite))
	s.mu.Lock()
	now := time.Now()
	for i, n := range req.NodesToWrite {
		if n.NodeID.Namespace() != 1 {
			status[i] = ua.StatusBadNotWritable
			if ns, err := srv.Namespace(int(n.NodeID.Namespace())); err == nil {
				status[i] = ns.SetAttribute(n.NodeID, n.AttributeID, n.Value)
			}
			continue
		}
		status[i] = s.opcuaWriteValue(now, peer, n)
	}
	s.mu.Unlock()
	return &ua.WriteResponse{ResponseHeader: responseHeader(req.RequestHeader), Results: status}, nil
}

// opcuaWriteValue applies one write of the device's namespace, by the
// mode's rules, and logs it.
func (s *Sim) opcuaWriteValue(now time.Time, peer string, n *ua.WriteValue) ua.StatusCode {
	reg, epoch, known := s.opcuaNode(n.NodeID)
	if !known {
		return ua.StatusBadNodeIDUnknown
	}
	if n.AttributeID != ua.AttributeIDValue {
		return ua.StatusBadNotWritable
	}
	var v any
	if n.Value != nil && n.Value.Value != nil {
		v = n.Value.Value.Value()
	}
	w := Write{Time: now, Peer: peer, Node: n.NodeID.String(), Register: reg}
	if epoch {
		e, isInt := v.(int64)
		switch {
		case !isInt:
			w.Reason = fmt.Sprintf("epoch declaration of type %T, want Int64", v)
		case e < s.highest:
			w.Epoch, w.Reason = e, fmt.Sprintf("epoch declaration %d behind owner epoch %d", e, s.highest)
		default:
			s.highest, s.connEpoch[peer] = e, e
			s.declared++
			return ua.StatusOK
		}
		s.record(w)
		if !isInt {
			return ua.StatusBadTypeMismatch
		}
		return ua.StatusBadUserAccessDenied
	}
	value, isUint16 := v.(uint16)
	w.Value = value
	if s.cfg.Mode == OwnerEpoch {
		w.Epoch = s.connEpoch[peer]
	}
	st := ua.StatusOK
	switch {
	case !isUint16:
		w.Reason, st = fmt.Sprintf("value of type %T, want UInt16", v), ua.StatusBadTypeMismatch
	case w.Epoch < s.highest:
		w.Reason, st = fmt.Sprintf("epoch %d behind owner epoch %d", w.Epoch, s.highest), ua.StatusBadUserAccessDenied
	default:
		w.Accepted = true
		s.regs[reg] = value
	}
	s.record(w)
	return st
}

// serverAttribute reads a node of the server's own namespaces (the server
// status, the namespace array), as gopcua's Read service does.
func serverAttribute(srv *server.Server, n *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
	ns, err := srv.Namespace(int(n.Namespace()))
	if err != nil {
		return statusValue(ua.StatusBadNodeIDUnknown)
	}
	return ns.Attribute(n, attr)
}

func statusValue(st ua.StatusCode) *ua.DataValue {
	return &ua.DataValue{EncodingMask: ua.DataValueStatusCode | ua.DataValueServerTimestamp, Status: st, ServerTimestamp: time.Now()}
}

func responseHeader(h *ua.RequestHeader) *ua.ResponseHeader {
	return &ua.ResponseHeader{Timestamp: time.Now(), RequestHandle: h.RequestHandle, ServiceResult: ua.StatusOK,
		ServiceDiagnostics: &ua.DiagnosticInfo{}, StringTable: []string{}, AdditionalHeader: ua.NewExtensionObject(nil)}
}

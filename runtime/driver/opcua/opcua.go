// Package opcua is the OPC UA field driver (github.com/gopcua/opcua): the
// runtime's registers mapped to a server's variable nodes, read by polling
// (the runtime's scan) and written under the lease.
//
// Epoch on the wire: a server that can check the writer's epoch exposes an
// owner-epoch variable (an integer node, epochNode in the URL). Before its
// first write on a session the driver reads it: a later epoch there than its
// permit's means another binding took the server, and the driver writes
// nothing at all (driver.LaterOwnerError, docs/design.md §3 L13). Otherwise
// it writes its permit's epoch there, in a request of its own, before the
// first output write. A server that checks refuses a lower epoch than the
// highest it has seen and every later write of a session behind; the driver
// reads the node back after a refused write to tell a stale epoch
// (ErrStaleEpoch) from any other refusal. A server without the node leaves
// the lease alone to keep one writer; so does a server that keeps the node
// but does not check it, after the first write of a session.
//
// Promotion adopts (L10) in the runtime; the driver adds that it never
// writes a node whose value it has not read on this session: the value's
// type is what the write carries, and a node it cannot read is not written.
package opcua

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/holdfast-io/holdfast/runtime/driver"
	"github.com/holdfast-io/holdfast/runtime/lease"
)

// serverState is the standard Server_ServerStatus_State variable, read by
// Connect when there is no owner-epoch node, to check the server answers.
var serverState = ua.NewNumericNodeID(0, 2259)

// Driver is an OPC UA client session to one server.
type Driver struct {
	cfg Config

	mu       sync.Mutex // one request at a time
	client   *opcua.Client
	declared int64                // the epoch declared on this session; 0 = none
	types    map[uint16]ua.TypeID // each node's value type, read on this session
}

// New returns a driver for cfg; it dials nothing until Connect.
func New(cfg Config) *Driver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Driver{cfg: cfg}
}

// Name of the driver.
func (d *Driver) Name() string { return d.cfg.Name }

// Network is true: OPC UA reaches its server over the network.
func (d *Driver) Network() bool { return true }

// Connect opens a secure channel and a session with the configured policy,
// mode and identity, then reads the owner-epoch node (or the server's
// state), so a server that accepts the connection but does not answer
// fails the dial after Timeout.
func (d *Driver) Connect(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLocked()
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	opts, err := d.options(ctx)
	if err != nil {
		return err
	}
	c, err := opcua.NewClient(d.cfg.Endpoint, opts...)
	if err != nil {
		return fmt.Errorf("opcua %s: %w", d.cfg.Endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		_ = c.Close(context.Background())
		return fmt.Errorf("opcua %s: connect: %w", d.cfg.Endpoint, err)
	}
	probe := serverState
	if d.cfg.EpochNode != nil {
		probe = d.cfg.EpochNode
	}
	if _, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: probe, AttributeID: ua.AttributeIDValue}},
		TimestampsToReturn: ua.TimestampsToReturnNeither}); err != nil {
		_ = c.Close(context.Background())
		return fmt.Errorf("opcua %s: server did not answer: %w", d.cfg.Endpoint, err)
	}
	d.client, d.declared, d.types = c, 0, map[uint16]ua.TypeID{}
	return nil
}

// options are the client's security and identity: the endpoint is chosen
// from the server's own list by policy and mode, so the server certificate
// and the user token policy are the server's.
func (d *Driver) options(ctx context.Context) ([]opcua.Option, error) {
	eps, err := opcua.GetEndpoints(ctx, d.cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("opcua %s: get endpoints: %w", d.cfg.Endpoint, err)
	}
	ep, err := opcua.SelectEndpoint(eps, d.cfg.Policy, d.cfg.Mode)
	if err != nil {
		return nil, fmt.Errorf("opcua %s: no endpoint with policy %s and mode %s: %w", d.cfg.Endpoint, d.cfg.Policy, d.cfg.Mode, err)
	}
	// The endpoint list names the server by its own host name; the dial
	// goes to the address configured.
	ep.EndpointURL = d.cfg.Endpoint
	opts := []opcua.Option{
		opcua.AutoReconnect(false), // driver.Reconnecting dials, one dial at a time
		opcua.RequestTimeout(d.cfg.Timeout),
		opcua.DialTimeout(d.cfg.Timeout),
		opcua.SecurityPolicy(d.cfg.Policy),
		opcua.SecurityMode(d.cfg.Mode),
	}
	if d.cfg.CertFile != "" {
		opts = append(opts, opcua.CertificateFile(d.cfg.CertFile), opcua.PrivateKeyFile(d.cfg.KeyFile))
	}
	auth := ua.UserTokenTypeAnonymous
	if d.cfg.User != "" {
		pass, err := d.cfg.password()
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", d.cfg.Name, err)
		}
		auth = ua.UserTokenTypeUserName
		opts = append(opts, opcua.AuthUsername(d.cfg.User, pass))
	} else {
		opts = append(opts, opcua.AuthAnonymous())
	}
	return append(opts, opcua.SecurityFromEndpoint(ep, auth)), nil
}

func (d *Driver) closeLocked() error {
	if d.client == nil {
		return nil
	}
	// A session on a dead connection would wait out its request timeout
	// to close; the close is bounded by the driver's own.
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
	defer cancel()
	err := d.client.Close(ctx)
	d.client, d.declared, d.types = nil, 0, nil
	return err
}

// Close ends the session and the connection.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closeLocked()
}

// ReadRegisters reads the nodes of count registers from addr.
func (d *Driver) ReadRegisters(ctx context.Context, addr, count uint16) ([]uint16, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return nil, driver.ErrNotConnected
	}
	regs := make([]uint16, count)
	for i := range regs {
		regs[i] = addr + uint16(i)
	}
	return d.readLocked(ctx, regs)
}

// readLocked reads the registers' nodes in one request and learns each
// value's type for the writes of this session.
func (d *Driver) readLocked(ctx context.Context, regs []uint16) ([]uint16, error) {
	ids, err := d.nodes(regs)
	if err != nil {
		return nil, err
	}
	vals, err := d.readValues(ctx, "read", ids)
	if err != nil {
		return nil, err
	}
	out := make([]uint16, len(vals))
	for i, v := range vals {
		n, err := toInt64(v)
		if err == nil && (n < 0 || n > math.MaxUint16) {
			err = fmt.Errorf("value %d is outside 0..65535", n)
		}
		if err != nil {
			return nil, &driver.DeviceError{Op: fmt.Sprintf("read register %d (node %s)", regs[i], ids[i]), Err: err}
		}
		out[i] = uint16(n)
		d.types[regs[i]] = v.Type()
	}
	return out, nil
}

// readValues reads the nodes' values in one request; a node the server
// answers with a bad status is a DeviceError naming it.
func (d *Driver) readValues(ctx context.Context, op string, ids []*ua.NodeID) ([]*ua.Variant, error) {
	req := &ua.ReadRequest{TimestampsToReturn: ua.TimestampsToReturnNeither}
	for _, id := range ids {
		req.NodesToRead = append(req.NodesToRead, &ua.ReadValueID{NodeID: id, AttributeID: ua.AttributeIDValue})
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	resp, err := d.client.Read(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("opcua %s: %w", op, err)
	}
	if len(resp.Results) != len(ids) {
		return nil, fmt.Errorf("opcua %s: %d results for %d nodes", op, len(resp.Results), len(ids))
	}
	out := make([]*ua.Variant, len(ids))
	for i, r := range resp.Results {
		if r.Status != ua.StatusOK {
			return nil, &driver.DeviceError{Op: fmt.Sprintf("%s node %s", op, ids[i]), Err: r.Status}
		}
		if r.Value == nil {
			return nil, &driver.DeviceError{Op: fmt.Sprintf("%s node %s", op, ids[i]), Err: errors.New("no value")}
		}
		out[i] = r.Value
	}
	return out, nil
}

// WriteRegisters declares the permit's epoch on this session when it has
// not yet, then writes values to the nodes from addr in one request.
func (d *Driver) WriteRegisters(ctx context.Context, p *lease.Permit, addr uint16, values []uint16) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return driver.ErrNotConnected
	}
	regs := make([]uint16, len(values))
	for i := range regs {
		regs[i] = addr + uint16(i)
	}
	ids, err := d.nodes(regs)
	if err != nil {
		return err
	}
	// A node whose value this session has not read is read first: its
	// type is what the write carries, and a node the driver cannot read is
	// one it does not write.
	var unread []uint16
	for _, r := range regs {
		if _, ok := d.types[r]; !ok {
			unread = append(unread, r)
		}
	}
	if len(unread) > 0 {
		if _, err := d.readLocked(ctx, unread); err != nil {
			return fmt.Errorf("nothing written: %w", err)
		}
	}
	out := make([]*ua.Variant, len(values))
	for i, v := range values {
		if out[i], err = fromInt64(d.types[regs[i]], int64(v)); err != nil {
			return &driver.DeviceError{Op: fmt.Sprintf("write register %d (node %s)", regs[i], ids[i]), Err: err}
		}
	}
	if d.cfg.EpochNode != nil && d.declared != p.Epoch() {
		typ, err := d.checkOwner(ctx, p.Epoch())
		if err != nil {
			return err
		}
		v, err := fromInt64(typ, p.Epoch())
		if err != nil {
			return &driver.DeviceError{Op: fmt.Sprintf("declare epoch (node %s)", d.cfg.EpochNode), Err: err}
		}
		if err := d.send(ctx, p, "declare epoch", []*ua.NodeID{d.cfg.EpochNode}, []*ua.Variant{v}); err != nil {
			return err
		}
		d.declared = p.Epoch()
	}
	return d.send(ctx, p, "write", ids, out)
}

// checkOwner reads the owner-epoch node before the first write on a
// session and refuses, sending nothing, when it holds a later epoch than
// epoch, or cannot be read: a node the runtime cannot read is an owner it
// cannot rule out. It returns the node's type.
func (d *Driver) checkOwner(ctx context.Context, epoch int64) (ua.TypeID, error) {
	vals, err := d.readValues(ctx, "read the owner epoch", []*ua.NodeID{d.cfg.EpochNode})
	if err != nil {
		return 0, err
	}
	owner, err := toInt64(vals[0])
	if err != nil {
		return 0, &driver.DeviceError{Op: fmt.Sprintf("read the owner epoch (node %s)", d.cfg.EpochNode), Err: err}
	}
	if owner > epoch {
		return 0, &driver.LaterOwnerError{Device: d.cfg.Name, Address: d.cfg.Endpoint, OwnerEpoch: owner, Epoch: epoch}
	}
	return vals[0].Type(), nil
}

// send puts one write request on the wire if the permit still holds.
func (d *Driver) send(ctx context.Context, p *lease.Permit, op string, ids []*ua.NodeID, vals []*ua.Variant) error {
	if !p.Valid() {
		return fmt.Errorf("opcua %s at epoch %d: %w", op, p.Epoch(), lease.ErrFenced)
	}
	req := &ua.WriteRequest{}
	for i, id := range ids {
		req.NodesToWrite = append(req.NodesToWrite, &ua.WriteValue{NodeID: id, AttributeID: ua.AttributeIDValue,
			Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: vals[i]}})
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	resp, err := d.client.Write(ctx, req)
	if err != nil {
		return fmt.Errorf("opcua %s: %w", op, err)
	}
	for i, st := range resp.Results {
		if st != ua.StatusOK {
			return d.refusal(ctx, fmt.Sprintf("%s node %s", op, ids[i]), p.Epoch(), st)
		}
	}
	if len(resp.Results) != len(ids) {
		return fmt.Errorf("opcua %s: %d results for %d nodes", op, len(resp.Results), len(ids))
	}
	return nil
}

// refusal turns a refused write into ErrStaleEpoch when the owner-epoch
// node is ahead of ours.
func (d *Driver) refusal(ctx context.Context, op string, epoch int64, st ua.StatusCode) error {
	if d.cfg.EpochNode != nil {
		if vals, err := d.readValues(ctx, "read the owner epoch", []*ua.NodeID{d.cfg.EpochNode}); err == nil {
			if owner, err := toInt64(vals[0]); err == nil && owner > epoch {
				return fmt.Errorf("%w: %s at epoch %d, server owner epoch %d", driver.ErrStaleEpoch, op, epoch, owner)
			}
		}
	}
	return &driver.DeviceError{Op: op, Err: st}
}

// nodes are the configured nodes of regs; a register without one is a
// configuration error, reported as a refusal so the session stays up.
func (d *Driver) nodes(regs []uint16) ([]*ua.NodeID, error) {
	ids := make([]*ua.NodeID, len(regs))
	for i, r := range regs {
		id, ok := d.cfg.Nodes[r]
		if !ok {
			known := make([]int, 0, len(d.cfg.Nodes))
			for k := range d.cfg.Nodes {
				known = append(known, int(k))
			}
			sort.Ints(known)
			return nil, &driver.DeviceError{Op: fmt.Sprintf("register %d", r),
				Err: fmt.Errorf("device %s maps no node to it (mapped: %v); add node.%d=NODEID to its URL", d.cfg.Name, known, r)}
		}
		ids[i] = id
	}
	return ids, nil
}

// toInt64 reads an integer (or boolean) value.
func toInt64(v *ua.Variant) (int64, error) {
	switch x := v.Value().(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case int8:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("value %d is out of range", x)
		}
		return int64(x), nil
	default:
		return 0, fmt.Errorf("value of type %s: only integer and boolean variables are supported", v.Type())
	}
}

// fromInt64 is n as a value of type t, refused when it does not fit.
func fromInt64(t ua.TypeID, n int64) (*ua.Variant, error) {
	fits := func(lo, hi int64) error {
		if n < lo || n > hi {
			return fmt.Errorf("value %d does not fit the node's type %s", n, t)
		}
		return nil
	}
	var v any
	var err error
	switch t {
	case ua.TypeIDBoolean:
		v, err = n != 0, fits(0, 1)
	case ua.TypeIDSByte:
		v, err = int8(n), fits(math.MinInt8, math.MaxInt8)
	case ua.TypeIDByte:
		v, err = uint8(n), fits(0, math.MaxUint8)
	case ua.TypeIDInt16:
		v, err = int16(n), fits(math.MinInt16, math.MaxInt16)
	case ua.TypeIDUint16:
		v, err = uint16(n), fits(0, math.MaxUint16)
	case ua.TypeIDInt32:
		v, err = int32(n), fits(math.MinInt32, math.MaxInt32)
	case ua.TypeIDUint32:
		v, err = uint32(n), fits(0, math.MaxUint32)
	case ua.TypeIDInt64:
		v = n
	case ua.TypeIDUint64:
		v, err = uint64(n), fits(0, math.MaxInt64)
	default:
		return nil, fmt.Errorf("node type %s: only integer and boolean variables are supported", t)
	}
	if err != nil {
		return nil, err
	}
	return ua.NewVariant(v)
}

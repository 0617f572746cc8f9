package opcua

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Defaults of a Config.
const (
	DefaultTimeout = 5 * time.Second
	PolicyNone     = "None"
	// PolicyBasic256Sha256 is the production policy, with SignAndEncrypt.
	PolicyBasic256Sha256 = "Basic256Sha256"
)

// Config of one OPC UA server.
type Config struct {
	// Name of the driver.
	Name string
	// Endpoint is the server's opc.tcp:// endpoint URL.
	Endpoint string
	// Policy is the security policy: None or Basic256Sha256.
	Policy string
	// Mode is the message security mode: None with policy None, Sign or
	// SignAndEncrypt with Basic256Sha256.
	Mode ua.MessageSecurityMode
	// CertFile and KeyFile are this client's certificate (DER or PEM) and
	// RSA private key (PEM); required with Basic256Sha256.
	CertFile, KeyFile string
	// User and PasswordFile authenticate the session by user name; empty
	// User is anonymous. The password is read from the file at each dial,
	// so it never stands in a flag or a process listing.
	User, PasswordFile string
	// Timeout of the dial and of every request.
	Timeout time.Duration
	// Nodes maps the runtime's register numbers to the server's nodes.
	Nodes map[uint16]*ua.NodeID
	// EpochNode is the owner-epoch variable (an integer); nil means the
	// server has none, and the lease alone keeps one writer.
	EpochNode *ua.NodeID
}

// ParseURL reads a device URL:
// opcua://host:port[/path]?node.100=ns=2;s=Valve&epochNode=ns=2;s=OwnerEpoch&timeout=5s
// &policy=None|Basic256Sha256&mode=None|Sign|SignAndEncrypt&cert=FILE&key=FILE&user=NAME&passwordFile=FILE.
// Node IDs keep OPC UA's own text form (ns=2;s=Valve): the query is split on
// '&' only, so ';' needs no escaping; a value may still be percent-encoded.
func ParseURL(name, raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("device %s: %w", name, err)
	}
	if u.Scheme != "opcua" {
		return Config{}, fmt.Errorf("device %s: scheme %q: must be opcua", name, u.Scheme)
	}
	if u.Host == "" || u.Port() == "" {
		return Config{}, fmt.Errorf("device %s: %q: must name host:port", name, raw)
	}
	cfg := Config{Name: name, Endpoint: "opc.tcp://" + u.Host + u.Path, Policy: PolicyNone,
		Mode: ua.MessageSecurityModeNone, Timeout: DefaultTimeout, Nodes: map[uint16]*ua.NodeID{}}
	var errs []error
	bad := func(key, v, must string) {
		errs = append(errs, fmt.Errorf("device %s: %s: %q: %s", name, key, v, must))
	}
	modeSet := false
	params, perr := splitQuery(u.RawQuery)
	if perr != nil {
		return Config{}, fmt.Errorf("device %s: %w", name, perr)
	}
	for _, p := range params {
		key, v := p[0], p[1]
		switch {
		case strings.HasPrefix(key, "node."):
			reg, err := strconv.ParseUint(strings.TrimPrefix(key, "node."), 10, 16)
			if err != nil {
				bad(key, v, "the register after node. must be 0..65535")
				continue
			}
			id, err := parseNodeID(v)
			if err != nil {
				bad(key, v, "must be an OPC UA node ID such as ns=2;s=Valve")
				continue
			}
			cfg.Nodes[uint16(reg)] = id
		case key == "epochNode":
			if strings.EqualFold(v, "none") {
				cfg.EpochNode = nil
				continue
			}
			id, err := parseNodeID(v)
			if err != nil {
				bad(key, v, "must be an OPC UA node ID such as ns=2;s=OwnerEpoch, or none")
				continue
			}
			cfg.EpochNode = id
		case key == "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				bad(key, v, "must be a positive duration")
			}
			cfg.Timeout = d
		case key == "policy":
			switch v {
			case PolicyNone, PolicyBasic256Sha256:
				cfg.Policy = v
			default:
				bad(key, v, "must be None or Basic256Sha256")
			}
		case key == "mode":
			m := ua.MessageSecurityModeFromString(v)
			if m == ua.MessageSecurityModeInvalid {
				bad(key, v, "must be None, Sign or SignAndEncrypt")
			}
			cfg.Mode, modeSet = m, true
		case key == "cert":
			cfg.CertFile = v
		case key == "key":
			cfg.KeyFile = v
		case key == "user":
			cfg.User = v
		case key == "passwordFile":
			cfg.PasswordFile = v
		default:
			errs = append(errs, fmt.Errorf("device %s: %s: unknown parameter (known: node.REGISTER, epochNode, timeout, policy, mode, cert, key, user, passwordFile)", name, key))
		}
	}
	if cfg.Policy == PolicyBasic256Sha256 && !modeSet {
		cfg.Mode = ua.MessageSecurityModeSignAndEncrypt
	}
	switch {
	case cfg.Mode == ua.MessageSecurityModeInvalid:
	case cfg.Policy == PolicyNone && cfg.Mode != ua.MessageSecurityModeNone:
		errs = append(errs, fmt.Errorf("device %s: mode: %s: policy None takes mode None; set policy=Basic256Sha256", name, cfg.Mode))
	case cfg.Policy != PolicyNone && cfg.Mode == ua.MessageSecurityModeNone:
		errs = append(errs, fmt.Errorf("device %s: mode: None: policy %s needs Sign or SignAndEncrypt", name, cfg.Policy))
	}
	if cfg.Policy != PolicyNone && (cfg.CertFile == "" || cfg.KeyFile == "") {
		errs = append(errs, fmt.Errorf("device %s: cert, key: policy %s needs this client's certificate and key files", name, cfg.Policy))
	}
	if (cfg.User == "") != (cfg.PasswordFile == "") {
		errs = append(errs, fmt.Errorf("device %s: user, passwordFile: give both or neither", name))
	}
	if len(cfg.Nodes) == 0 {
		errs = append(errs, fmt.Errorf("device %s: node.REGISTER: no node configured; map each register the outputs and inputs use, e.g. node.100=ns=2;s=Valve", name))
	}
	return cfg, errors.Join(errs...)
}

// parseNodeID reads OPC UA's text form of a node ID, which must say its
// kind (ns=, nsu=, i=, s=, g= or b=): gopcua's parser takes any other text
// as a string ID, so a typo would name a node nobody meant.
func parseNodeID(s string) (*ua.NodeID, error) {
	rest := s
	if strings.HasPrefix(rest, "ns=") || strings.HasPrefix(rest, "nsu=") {
		_, after, ok := strings.Cut(rest, ";")
		if !ok {
			return nil, errors.New("no identifier after the namespace")
		}
		rest = after
	}
	switch {
	case strings.HasPrefix(rest, "i="), strings.HasPrefix(rest, "s="), strings.HasPrefix(rest, "g="), strings.HasPrefix(rest, "b="):
	default:
		return nil, errors.New("no identifier kind (i=, s=, g= or b=)")
	}
	return ua.ParseNodeID(s)
}

// splitQuery splits a raw query on '&' alone and unescapes each key and
// value, in the order given.
func splitQuery(raw string) ([][2]string, error) {
	var out [][2]string
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", part, err)
		}
		val, err := url.PathUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", part, err)
		}
		out = append(out, [2]string{key, val})
	}
	return out, nil
}

func (c Config) password() (string, error) {
	if c.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("passwordFile: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

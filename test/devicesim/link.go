package devicesim

import (
	"io"
	"net"
	"sync"
)

// Link is a TCP relay in front of a device, for the faults a field network
// has: Hold accepts connections and answers nothing (a coupler that takes
// the connection and never replies, so a dial waits out its timeout), Open
// relays every held and later connection to the device, and Cut drops every
// connection.
type Link struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	open     bool
	held     []net.Conn
	conns    []net.Conn
	accepted int
	closed   bool
}

// NewLink listens on a free loopback port and relays to target once open.
func NewLink(target string, open bool) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{target: target, ln: ln, open: open}
	go l.accept()
	return l, nil
}

// Addr is the address clients dial.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Accepted counts connections the link accepted.
func (l *Link) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.accepted++
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		if !l.open {
			l.held = append(l.held, c)
			l.mu.Unlock()
			continue
		}
		l.mu.Unlock()
		l.relay(c)
	}
}

func (l *Link) relay(c net.Conn) {
	d, err := net.Dial("tcp", l.target)
	if err != nil {
		c.Close()
		return
	}
	l.mu.Lock()
	l.conns = append(l.conns, c, d)
	l.mu.Unlock()
	go func() { _, _ = io.Copy(d, c); d.Close() }()
	go func() { _, _ = io.Copy(c, d); c.Close() }()
}

// Open relays every held connection, and every later one, to the device.
func (l *Link) Open() {
	l.mu.Lock()
	l.open = true
	held := l.held
	l.held = nil
	l.mu.Unlock()
	for _, c := range held {
		l.relay(c)
	}
}

// Hold answers nothing on new connections until Open.
func (l *Link) Hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open = false
}

// Cut drops every open and held connection; new ones are held.
func (l *Link) Cut() {
	l.mu.Lock()
	conns := append(l.conns, l.held...)
	l.conns, l.held, l.open = nil, nil, false
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Close stops the link and drops every connection.
func (l *Link) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.Cut()
	return l.ln.Close()
}

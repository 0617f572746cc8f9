package lease

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// tlsHandshake is the first byte of every TLS connection: a handshake
// record.
const tlsHandshake = 0x16

// peekTimeout bounds the wait for a new connection's first byte.
const peekTimeout = 10 * time.Second

// splitListener accepts on one port and hands each connection to the TLS
// server or the plain one by its first byte, so the lease endpoint refuses
// a plain-HTTP grant with an answer (and counts it) instead of a TLS
// handshake error, and still serves its status to plain readers.
type splitListener struct {
	ln         net.Listener
	tls, plain *chanListener
	done       chan struct{}
	once       sync.Once
}

func newSplitListener(ln net.Listener) *splitListener {
	s := &splitListener{ln: ln, done: make(chan struct{})}
	s.tls, s.plain = &chanListener{s: s, c: make(chan net.Conn)}, &chanListener{s: s, c: make(chan net.Conn)}
	go s.accept()
	return s
}

func (s *splitListener) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			s.Close()
			return
		}
		go s.route(c)
	}
}

// route reads the connection's first byte (without consuming it) and
// queues the connection to the server that speaks it.
func (s *splitListener) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return
	}
	to := s.plain
	if first[0] == tlsHandshake {
		to = s.tls
	}
	select {
	case to.c <- &peekedConn{Conn: c, r: br}:
	case <-s.done:
		_ = c.Close()
	}
}

func (s *splitListener) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	return err
}

// chanListener is one server's side of a splitListener.
type chanListener struct {
	s *splitListener
	c chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.s.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { return l.s.Close() }
func (l *chanListener) Addr() net.Addr { return l.s.ln.Addr() }

// peekedConn reads first what route peeked.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

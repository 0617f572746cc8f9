package lease

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// maxGrantBytes bounds a grant body; a real one is about 150 bytes.
const maxGrantBytes = 64 << 10

// Handler serves the Keeper on leaseapi.Path: POST applies a grant from the
// authorised grantor, GET reports the Status to anyone.
type Handler struct {
	k    *Keeper
	auth Authenticator
	log  klog.Logger
	// OnGrant, when set, is called after every grant the handler answered
	// 200, with its outcome (for metrics and logs).
	OnGrant func(g *leaseapi.Grant, out Outcome)
	// LaterOwners, when set, lists the devices the runtime writes nothing
	// to because their owner epoch is later than its own (L13); every
	// Reply and Status carries it.
	LaterOwners func() []leaseapi.LaterOwner
	// OnRefused, when set, is called for every grant refused because its
	// sender is not the authorised grantor, with the reason.
	OnRefused func(reason string)
}

// NewHandler returns the lease endpoint of k, taking grants only from
// senders auth admits: MutualTLS, or InsecurePlaintext.
func NewHandler(k *Keeper, auth Authenticator, log klog.Logger) *Handler {
	if auth == nil {
		panic("lease.NewHandler: no Authenticator; use MutualTLS, or InsecurePlaintext behind --insecure-plaintext-lease")
	}
	return &Handler{k: k, auth: auth, log: log}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The arrival instant is read before anything else, so the time spent
	// decoding is charged to the runtime's lease and never credited to it.
	arrival := h.k.clock.Now()
	if r.URL.Path != leaseapi.Path {
		writeJSON(w, http.StatusNotFound, leaseapi.Error{Message: fmt.Sprintf("no such path %q; the lease endpoint is %s", r.URL.Path, leaseapi.Path)})
		return
	}
	switch r.Method {
	case http.MethodGet:
		st := h.k.Status()
		if h.LaterOwners != nil {
			st.LaterOwners = h.LaterOwners()
		}
		writeJSON(w, http.StatusOK, st)
	case http.MethodPost:
		h.grant(w, r, arrival)
	default:
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, http.StatusMethodNotAllowed, leaseapi.Error{Message: "method " + r.Method + " not allowed; use GET or POST"})
	}
}

func (h *Handler) grant(w http.ResponseWriter, r *http.Request, arrival time.Time) {
	// Nothing of an unauthenticated grant is read: it extends nothing, and
	// its sender learns nothing of this runtime's binding.
	if ref := h.auth.Authenticate(r); ref != nil {
		if h.OnRefused != nil {
			h.OnRefused(ref.Reason)
		}
		h.log.V(1).Info("Refused a grant from a sender that is not the authorised grantor", "remote", r.RemoteAddr, "reason", ref.Reason, "why", ref.Message)
		writeJSON(w, http.StatusForbidden, leaseapi.Error{Message: ref.Message, Reason: leaseapi.ReasonUnauthenticated})
		return
	}
	var g leaseapi.Grant
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxGrantBytes))
	if err := dec.Decode(&g); err != nil {
		writeJSON(w, http.StatusBadRequest, leaseapi.Error{Message: "malformed grant: " + err.Error()})
		return
	}
	if errs := g.Validate(); len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, leaseapi.Error{Message: "invalid grant: " + errs.ToAggregate().Error()})
		return
	}
	// Only here, past the authentication, may a grant bind a warm runtime
	// to its epoch.
	if epoch, ok := h.k.Bind(g.Unit, g.Epoch); !ok {
		msg := fmt.Sprintf("grant for unit %s epoch %d refused: this runtime drives unit %s at epoch %d",
			g.Unit, g.Epoch, h.k.cfg.Unit, epoch)
		if epoch == 0 {
			msg = fmt.Sprintf("grant for unit %s epoch %d refused: this runtime is a warm standby of unit %s, bound to no epoch yet",
				g.Unit, g.Epoch, h.k.cfg.Unit)
		}
		h.log.Info("Refused a grant for another binding", "grantUnit", g.Unit, "grantEpoch", g.Epoch,
			"grantor", g.Grantor, "seq", g.Seq)
		writeJSON(w, http.StatusConflict, leaseapi.Conflict{Message: msg, RuntimeEpoch: epoch, GrantEpoch: g.Epoch})
		return
	}
	out, reply := h.k.Grant(&g, arrival)
	if h.LaterOwners != nil {
		reply.LaterOwners = h.LaterOwners()
	}
	if h.OnGrant != nil {
		h.OnGrant(&g, out)
	}
	h.log.V(4).Info("Grant answered", "grantor", g.Grantor, "seq", g.Seq, "outcome", out, "state", reply.State)
	writeJSON(w, http.StatusOK, reply)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Server is the lease endpoint's listener and HTTP servers.
type Server struct {
	ln    net.Listener
	srvs  []*http.Server
	split *splitListener
}

func newHTTPServer(h http.Handler, log klog.Logger) *http.Server {
	srv := &http.Server{
		Handler: h,
		// Handshakes that fail (a scanner, a peer that refused this
		// runtime's certificate) are the other end's business; refused
		// grants are counted by the handler.
		ErrorLog:          stdlog.New(logWriter{log.V(2)}, "", 0),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	return srv
}

// Listen binds addr now, so a port in use fails start-up at once, and
// serves h on it in the background. With tlsConfig, a connection that opens
// with a TLS handshake is served HTTP/2 (or HTTP/1.1) over TLS, and any
// other is served plain HTTP/1.1 or h2c, where h takes no grant (its
// Authenticator refuses plain HTTP) but answers the status the node plugin's
// watchdog reads. Without tlsConfig everything is plain HTTP.
func Listen(addr string, h http.Handler, tlsConfig *tls.Config, log klog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lease endpoint: %w", err)
	}
	s := &Server{ln: ln}
	plain := newHTTPServer(h, log)
	plain.Protocols.SetUnencryptedHTTP2(true)
	s.srvs = append(s.srvs, plain)
	serve := func(srv *http.Server, f func() error) {
		go func() {
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				log.Error(err, "Lease endpoint stopped")
			}
		}()
	}
	if tlsConfig == nil {
		serve(plain, func() error { return plain.Serve(ln) })
		return s, nil
	}
	secure := newHTTPServer(h, log)
	secure.Protocols.SetHTTP2(true)
	secure.TLSConfig = tlsConfig.Clone()
	s.srvs = append(s.srvs, secure)
	s.split = newSplitListener(ln)
	serve(plain, func() error { return plain.Serve(s.split.plain) })
	serve(secure, func() error { return secure.ServeTLS(s.split.tls, "", "") })
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// logWriter carries the HTTP servers' own messages into the log.
type logWriter struct{ log klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info("Lease endpoint: " + strings.TrimSpace(string(p)))
	return len(p), nil
}

// Shutdown stops the servers.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range s.srvs {
		errs = append(errs, srv.Shutdown(ctx))
	}
	return errors.Join(append(errs, s.closeListener())...)
}

// Close stops the servers at once, dropping open connections.
func (s *Server) Close() error {
	var errs []error
	for _, srv := range s.srvs {
		errs = append(errs, srv.Close())
	}
	return errors.Join(append(errs, s.closeListener())...)
}

func (s *Server) closeListener() error {
	if s.split == nil {
		return nil
	}
	if err := s.split.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

package lease

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
)

// maxGrantBytes bounds a grant body; a real one is about 150 bytes.
const maxGrantBytes = 64 << 10

// Handler serves the Keeper on leaseapi.Path: POST applies a grant, GET
// reports the Status.
type Handler struct {
	k   *Keeper
	log klog.Logger
	// OnGrant, when set, is called after every grant the handler answered
	// 200, with its outcome (for metrics and logs).
	OnGrant func(g *leaseapi.Grant, out Outcome)
	// LaterOwners, when set, lists the devices the runtime writes nothing
	// to because their owner epoch is later than its own (L13); every
	// Reply and Status carries it.
	LaterOwners func() []leaseapi.LaterOwner
}

// NewHandler returns the lease endpoint of k.
func NewHandler(k *Keeper, log klog.Logger) *Handler {
	return &Handler{k: k, log: log}
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
	if g.Unit != h.k.cfg.Unit || g.Epoch != h.k.cfg.Epoch {
		msg := fmt.Sprintf("grant for unit %s epoch %d refused: this runtime drives unit %s at epoch %d",
			g.Unit, g.Epoch, h.k.cfg.Unit, h.k.cfg.Epoch)
		h.log.Info("Refused a grant for another binding", "grantUnit", g.Unit, "grantEpoch", g.Epoch,
			"grantor", g.Grantor, "seq", g.Seq)
		writeJSON(w, http.StatusConflict, leaseapi.Conflict{Message: msg, RuntimeEpoch: h.k.cfg.Epoch, GrantEpoch: g.Epoch})
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

// Server is the lease endpoint's listener and HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr now, so a port in use fails start-up at once, and
// serves h on it in the background: HTTP/2 over TLS when tlsConfig is set,
// otherwise HTTP/1.1 and HTTP/2 with prior knowledge (h2c).
func Listen(addr string, h http.Handler, tlsConfig *tls.Config, log klog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lease endpoint: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	if tlsConfig != nil {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = tlsConfig.Clone()
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	s := &Server{srv: srv, ln: ln}
	go func() {
		var err error
		if tlsConfig != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Lease endpoint stopped")
		}
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the server.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close stops the server at once, dropping open connections.
func (s *Server) Close() error { return s.srv.Close() }

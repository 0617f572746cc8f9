package lease

import (
	"crypto/x509"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/holdfast-io/holdfast/internal/leasetls"
)

// Authenticator decides whether a grant comes from the authorised grantor
// (docs/design.md §3 L12). The handler asks it before it reads a grant; a
// refused grant is answered 403 and extends nothing.
type Authenticator interface {
	// Authenticate returns nil when r was sent by the authorised grantor,
	// and otherwise why not.
	Authenticate(r *http.Request) *Refusal
}

// Refusal says why a grant's sender is not the authorised grantor.
type Refusal struct {
	// Reason is a metric label: plaintext, no_certificate,
	// untrusted_certificate or wrong_identity.
	Reason string
	// Message says what was presented and what was expected.
	Message string
}

// MutualTLS admits grants sent over TLS with a client certificate that
// chains to roots() (read on every grant, so a reloaded bundle applies at
// once), is for client authentication and names grantor (api/lease
// GrantorIdentity).
func MutualTLS(roots func() *x509.CertPool, grantor string) Authenticator {
	return &mutualTLS{roots: roots, grantor: grantor}
}

type mutualTLS struct {
	roots   func() *x509.CertPool
	grantor string
	// last is the last certificate admitted: every grant on one connection
	// presents the same one, which need not be verified again until it
	// expires or the bundle changes.
	last atomic.Pointer[admitted]
}

type admitted struct {
	leaf  *x509.Certificate
	roots *x509.CertPool
}

func (m *mutualTLS) Authenticate(r *http.Request) *Refusal {
	if r.TLS == nil {
		return &Refusal{Reason: leasetls.Plaintext, Message: "grants are taken only over mutual TLS from the authorised grantor; this one came over plain HTTP"}
	}
	roots, peer := m.roots(), r.TLS.PeerCertificates
	if a := m.last.Load(); a != nil && len(peer) > 0 && peer[0] == a.leaf && roots == a.roots && time.Now().Before(a.leaf.NotAfter) {
		return nil
	}
	if ref := leasetls.VerifyPeer(peer, roots, x509.ExtKeyUsageClientAuth, m.grantor); ref != nil {
		return &Refusal{Reason: ref.Reason, Message: "grants are taken only from the authorised grantor " + m.grantor + ": client " + ref.Error()}
	}
	// Only a leaf whose chain has no member expiring first: an intermediate
	// of shorter life is verified on every grant.
	if expiresFirst(peer) {
		m.last.Store(&admitted{leaf: peer[0], roots: roots})
	}
	return nil
}

// expiresFirst: no certificate the peer sent after its leaf expires before
// the leaf.
func expiresFirst(chain []*x509.Certificate) bool {
	for _, c := range chain[1:] {
		if c.NotAfter.Before(chain[0].NotAfter) {
			return false
		}
	}
	return true
}

// InsecurePlaintext admits every grant, whoever sent it and however: any
// process that reaches the port can keep the runtime writing. Only for a
// runtime started with --insecure-plaintext-lease.
var InsecurePlaintext Authenticator = insecure{}

type insecure struct{}

func (insecure) Authenticate(*http.Request) *Refusal { return nil }

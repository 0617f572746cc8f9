// Package leasetls is the lease channel's TLS (docs/design.md §3 L12), shared by
// the runtime and the controller: checking the other end's certificate and
// identity, reading credentials from files and reloading them when they
// change, and issuing certificates from the lease CA.
package leasetls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
)

// Reasons an end is not authenticated. The runtime counts the grants it
// refuses by them (holdfast_runtime_lease_grants_unauthenticated_total).
const (
	// Plaintext: the request came over plain HTTP.
	Plaintext = "plaintext"
	// NoCertificate: the TLS peer presented no certificate.
	NoCertificate = "no_certificate"
	// Untrusted: the certificate does not chain to a trusted lease CA for
	// this use (another CA, expired, not yet valid, or made for the other
	// end of the channel).
	Untrusted = "untrusted_certificate"
	// WrongIdentity: the certificate chains to the lease CA but names
	// another identity.
	WrongIdentity = "wrong_identity"
)

// Refusal says why an end is not the one expected.
type Refusal struct {
	// Reason is one of Plaintext, NoCertificate, Untrusted, WrongIdentity.
	Reason string
	Err    error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// VerifyPeer checks that chain, the certificates a peer presented (leaf
// first), chains to roots for usage, and that its leaf names identity as a
// URI SAN. Validity is judged on the wall clock now.
func VerifyPeer(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, identity string) *Refusal {
	if len(chain) == 0 {
		return &Refusal{Reason: NoCertificate, Err: errors.New("no certificate was presented")}
	}
	leaf := chain[0]
	if roots == nil {
		// A nil pool would mean the system roots to crypto/x509.
		return &Refusal{Reason: Untrusted, Err: fmt.Errorf("certificate %s: no lease CA is trusted here", describe(leaf))}
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return &Refusal{Reason: Untrusted, Err: fmt.Errorf("certificate %s is not trusted: %w", describe(leaf), err)}
	}
	if !slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == identity }) {
		return &Refusal{Reason: WrongIdentity, Err: fmt.Errorf("certificate %s does not name %s", describe(leaf), identity)}
	}
	return nil
}

// describe names a certificate in a message: its subject and identities.
func describe(c *x509.Certificate) string {
	ids := make([]string, 0, len(c.URIs))
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	return fmt.Sprintf("%q (identities %v, issuer %q)", c.Subject.String(), ids, c.Issuer.String())
}

// MinVersion of both ends: both are holdfast's own, so TLS 1.3 only.
const MinVersion = tls.VersionTLS13

// ServerConfig is a runtime's lease endpoint: cert gives its certificate now
// (reloaded without a restart), and a client certificate is asked for but
// judged per grant by the handler (VerifyPeer), which refuses with the reason
// and counts it; a status read needs none.
func ServerConfig(cert func() *tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := cert(); c != nil {
				return c, nil
			}
			return nil, errors.New("no lease certificate loaded")
		},
	}
}

// ClientConfig is the grantor's TLS towards one binding's runtime: cert gives
// the grantor's client certificate now, and the connection is made only to a
// server whose certificate chains to roots() for server authentication and
// names identity. The server's name is not checked against the address:
// the grantor reaches runtimes at host IPs, and the identity is what says
// which runtime answered.
func ClientConfig(cert func() *tls.Certificate, roots func() *x509.CertPool, identity string) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		// Verified in VerifyConnection against the lease CA and the
		// binding's identity instead of a host name.
		InsecureSkipVerify: true, //nolint:gosec // see VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if r := VerifyPeer(cs.PeerCertificates, roots(), x509.ExtKeyUsageServerAuth, identity); r != nil {
				return r
			}
			return nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := cert(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil
		},
	}
}

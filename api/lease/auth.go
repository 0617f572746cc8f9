package lease

import "strconv"

// The lease channel is mutually authenticated (docs/design.md §3 L12): the
// grantor sends a grant only over TLS to an endpoint whose certificate names
// the binding's runtime, and a runtime takes a grant only from a client
// certificate that names the grantor. Both certificates chain to the lease
// CA: the grantor's is made by the controller from the lease CA it holds;
// a runtime's is issued to its pod through a Kubernetes
// PodCertificateRequest addressed to SignerName, and the CA bundle reaches
// the pod in a ClusterTrustBundle of SignerName.
const (
	// SignerName signs runtime pods' lease certificates and names the
	// ClusterTrustBundle that carries the lease CA to them.
	SignerName = "holdfast.io/lease"

	// GrantorIdentity is the URI SAN of the grantor's client certificate.
	// A runtime takes a grant only from a certificate that chains to its
	// trust bundle, is for client authentication and names this URI.
	GrantorIdentity = "holdfast://grantor"

	// CredentialsFile, in a runtime's lease TLS directory, holds its
	// private key (a PKCS#8 PRIVATE KEY block) followed by its certificate
	// chain, leaf first: what the kubelet projects at a podCertificate
	// source's credentialBundlePath, read in one go so the key and the
	// certificate always match.
	CredentialsFile = "credentials.pem"
	// TrustBundleFile, in the same directory, holds the CA certificates
	// (PEM) a grantor's certificate must chain to.
	TrustBundleFile = "ca.crt"

	// ReasonUnauthenticated is the Error.Reason of a grant refused (403)
	// because its sender did not prove to be the authorised grantor; the
	// grant was not read and extended nothing.
	ReasonUnauthenticated = "Unauthenticated"
)

// runtimeIdentityPrefix starts every runtime identity.
const runtimeIdentityPrefix = "holdfast://runtime/"

// RuntimeIdentity is the URI SAN of the serving certificate of the runtime
// of unit (namespace/name) at epoch: holdfast://runtime/NAMESPACE/NAME/eEPOCH.
// The grantor sends a binding's grants only to an endpoint proving it, so a
// runtime of another binding, or anything else that took over its address,
// is never granted.
func RuntimeIdentity(unit string, epoch int64) string {
	return runtimeIdentityPrefix + unit + "/e" + strconv.FormatInt(epoch, 10)
}

// WarmRuntimeIdentity is the URI SAN of the serving certificate of unit's
// (namespace/name) warm standby pod of UID podUID:
// holdfast://runtime/NAMESPACE/NAME/warm/UID. A warm pod has no epoch when
// its certificate is made, so it proves which pod it is instead; the grantor
// sends a binding that promoted a warm pod its grants only to an endpoint
// proving the UID the binding recorded.
func WarmRuntimeIdentity(unit, podUID string) string {
	return runtimeIdentityPrefix + unit + "/warm/" + podUID
}

// BindingIdentity is the identity the runtime of a binding of unit at epoch
// proves: the warm identity of podUID when the binding promoted a warm pod
// (podUID set), the epoch's identity otherwise.
func BindingIdentity(unit string, epoch int64, podUID string) string {
	if podUID != "" {
		return WarmRuntimeIdentity(unit, podUID)
	}
	return RuntimeIdentity(unit, epoch)
}

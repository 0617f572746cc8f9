# shellcheck shell=bash disable=SC2034 # the variables are demo.sh's
# The parts of the kind demo's voter swap story that need no cluster,
# sourced by kind-config/demo.sh and run by kind-config/swap_test.go against
# kubeadm's own code and the StaticPod actuator: what is written to a kind
# node is checked here, without Docker.

# kubeadm's layout on every node: the chart's node.staticPod values and
# VoterPolicy spec.host.staticPod name the same paths.
KUBEADM_PKI=/etc/kubernetes/pki
KUBEADM_MANIFESTS=/etc/kubernetes/manifests
APISERVER_TEMPLATE=/etc/kubernetes/holdfast/kube-apiserver.yaml

# What kubeadm join --control-plane copies from a control-plane node
# (relative to KUBEADM_PKI): the cluster CA, the service-account key pair,
# the front-proxy CA and the etcd CA, each with its key. The node's own
# serving and client certificates are issued on it (kubeadm_certs_config),
# and the StaticPod actuator issues the etcd member's.
SHARED_PKI=(ca.crt ca.key sa.key sa.pub front-proxy-ca.crt front-proxy-ca.key etcd/ca.crt etcd/ca.key)

# kubeadm's health-check client of etcd, which holdfast-node reads on every
# node (values-swap.yaml node.etcd); kubeadm puts it on control-plane nodes
# only.
ETCD_CLIENT_PKI=(etcd/ca.crt etcd/healthcheck-client.crt etcd/healthcheck-client.key)

# The certificates kubeadm issues a joining control-plane node for its
# kube-apiserver (kubeadm init phase certs NAME).
APISERVER_CERTS=(apiserver apiserver-kubelet-client front-proxy-client)

# apiserver_template FROM TO: the kube-apiserver manifest kubeadm wrote on
# the control-plane node at FROM (stdin) as the template of the host at TO
# (stdout). The actuator copies the template as it is, so every place
# kubeadm wrote the node's own address (--advertise-address, the probes'
# host, the advertise-address annotation) must already name TO; the rest
# (certificate paths, etcd at 127.0.0.1, the service range) is the same on
# every control-plane node. kind's node addresses are IPv4.
apiserver_template() {
	local from=$1 to=$2 ip='^[0-9]{1,3}(\.[0-9]{1,3}){3}$' re out
	if [[ ! $from =~ $ip || ! $to =~ $ip ]]; then
		echo "apiserver_template: '$from' and '$to' must be IPv4 node addresses (kind's)" >&2
		return 1
	fi
	re="(^|[^0-9.])${from//./\\.}([^0-9.]|\$)"
	out=$(sed -E "s/$re/\\1$to\\2/g") || return 1
	if grep -qE -- "$re" <<<"$out"; then
		echo "apiserver_template: $from is still in the template" >&2
		return 1
	fi
	if ! grep -qF -- "--advertise-address=$to" <<<"$out"; then
		echo "apiserver_template: no --advertise-address=$from in the manifest: is it kubeadm's kube-apiserver.yaml of the node at $from?" >&2
		return 1
	fi
	printf '%s\n' "$out"
}

# kubeadm_certs_config NODE IP: the kubeadm configuration that issues the
# apiserver certificates of control-plane node NODE at IP (kubeadm init
# phase certs --config): the cluster's ClusterConfiguration (stdin, from
# the kubeadm-config ConfigMap, as kubeadm join reads it) and the node's
# own InitConfiguration.
kubeadm_certs_config() {
	local node=$1 ip=$2 cluster version
	cluster=$(cat)
	version=$(awk '$1 == "apiVersion:" { print $2; exit }' <<<"$cluster")
	if [[ $version != kubeadm.k8s.io/* ]] || ! grep -q '^kind: ClusterConfiguration$' <<<"$cluster"; then
		echo "kubeadm_certs_config: stdin is not a kubeadm ClusterConfiguration (kubeadm-config's data.ClusterConfiguration)" >&2
		return 1
	fi
	printf '%s\n---\napiVersion: %s\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: "%s"\n  bindPort: 6443\nnodeRegistration:\n  name: "%s"\n  criSocket: unix:///run/containerd/containerd.sock\n' \
		"$cluster" "$version" "$ip" "$node"
}

# voter_policy ENDPOINTS ETCD_IMAGE VOTERS: kind-config/voterpolicy.yaml
# with the cluster's etcd client URLs (comma-separated), its etcd image and
# its voter count.
voter_policy() {
	sed -e "s|@ENDPOINTS@|$1|" -e "s|@ETCD_IMAGE@|$2|" -e "s|@TARGET_VOTERS@|$3|" "$(dirname "${BASH_SOURCE[0]}")/voterpolicy.yaml"
}

# control_plane_endpoint: the host:port of the cluster's control-plane
# endpoint (kind's load balancer) in its ClusterConfiguration (stdin).
control_plane_endpoint() {
	local ep
	ep=$(awk '$1 == "controlPlaneEndpoint:" { gsub(/"/, "", $2); print $2; exit }')
	if [[ ! $ep =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]]; then
		echo "control_plane_endpoint: no controlPlaneEndpoint host:port in the ClusterConfiguration ('$ep'): a kind cluster with one control-plane node has no load balancer" >&2
		return 1
	fi
	printf '%s\n' "$ep"
}

# kubelet_conf_at ENDPOINT: a kubelet's kubeconfig (stdin) with its
# cluster's server at https://ENDPOINT (stdout), its credentials as they
# are.
kubelet_conf_at() {
	local out
	out=$(sed -E "s#^( *server: ).*#\\1https://$1#") || return 1
	if [[ $(grep -c '^ *server: ' <<<"$out") != 1 ]]; then
		echo "kubelet_conf_at: the kubeconfig must name exactly one cluster server" >&2
		return 1
	fi
	printf '%s\n' "$out"
}

package voters

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// Etcd is what the voter controller asks etcd. ClientEtcd is the real one.
type Etcd interface {
	// Observe reads the member list (linearizable) through endpoints and
	// each member's Status on its own client URL.
	Observe(ctx context.Context, endpoints []string) EtcdView
	// AddLearner adds a learner with the peer URL; it returns its ID.
	AddLearner(ctx context.Context, endpoints []string, peerURL string) (uint64, error)
	// Promote promotes a learner; etcd refuses one not yet in sync.
	Promote(ctx context.Context, endpoints []string, id uint64) error
	// Remove removes a member.
	Remove(ctx context.Context, endpoints []string, id uint64) error
	// MoveLeader asks the leader (at leaderEndpoint) to hand over to id.
	MoveLeader(ctx context.Context, leaderEndpoint string, to uint64) error
	// Snapshot streams a snapshot from the member at endpoint into path and
	// verifies it.
	Snapshot(ctx context.Context, endpoint, path string) (*holdfastv1.SnapshotRecord, error)
}

// ClientEtcd is Etcd through the etcd client v3. Each call dials the
// endpoints it is given and closes its client: the members change during a
// swap, and a client pinned to a paused member must never stall a pass.
type ClientEtcd struct {
	TLS *tls.Config
	// StatusTimeout bounds each member's Status (default 2s); RequestTimeout
	// each membership call and the member list (default 5s).
	StatusTimeout, RequestTimeout time.Duration
}

func (e *ClientEtcd) timeouts() (time.Duration, time.Duration) {
	st, rt := e.StatusTimeout, e.RequestTimeout
	if st == 0 {
		st = 2 * time.Second
	}
	if rt == 0 {
		rt = 5 * time.Second
	}
	return st, rt
}

func (e *ClientEtcd) client(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no etcd endpoint to ask")
	}
	_, rt := e.timeouts()
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: rt, TLS: e.TLS, Logger: zap.NewNop(),
		// A member that stops answering is given up quickly.
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
}

// Observe implements Etcd.
func (e *ClientEtcd) Observe(ctx context.Context, endpoints []string) EtcdView {
	st, rt := e.timeouts()
	var ml *clientv3.MemberListResponse
	var errs []string
	// Each endpoint alone, in the order given (those that answered last
	// first): a paused member must not hide the others' answer.
	for _, ep := range endpoints {
		resp, err := e.memberList(ctx, []string{ep}, rt)
		if err == nil {
			ml = resp
			break
		}
		errs = append(errs, fmt.Sprintf("%s: %v", ep, err))
	}
	if len(endpoints) == 0 {
		errs = append(errs, "no endpoint: VoterPolicy spec.etcd.endpoints is empty")
	}
	if ml == nil {
		return EtcdView{Err: strings.Join(errs, "; ")}
	}
	v := EtcdView{ClusterID: ml.Header.ClusterId}
	v.Members = make([]Member, len(ml.Members))
	var wg sync.WaitGroup
	for i, m := range ml.Members {
		v.Members[i] = Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
		if len(m.ClientURLs) == 0 {
			v.Members[i].Problem = "not started"
			continue
		}
		wg.Add(1)
		go func(mem *Member) {
			defer wg.Done()
			e.status(ctx, mem, st)
		}(&v.Members[i])
	}
	wg.Wait()
	return v
}

func (e *ClientEtcd) memberList(ctx context.Context, eps []string, timeout time.Duration) (*clientv3.MemberListResponse, error) {
	cli, err := e.client(eps)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cli.MemberList(ctx)
}

func (e *ClientEtcd) status(ctx context.Context, m *Member, timeout time.Duration) {
	ep := m.ClientURLs[0]
	cli, err := e.client([]string{ep})
	if err != nil {
		m.Problem = err.Error()
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := cli.Status(ctx, ep)
	if err != nil {
		m.Problem = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			m.Problem = fmt.Sprintf("no Status answer from %s within %v", ep, timeout)
		}
		return
	}
	m.Answered = true
	m.Leader = resp.Leader
	m.Revision = resp.Header.Revision
	if len(resp.Errors) > 0 {
		m.Problem = strings.Join(resp.Errors, "; ")
	}
}

// AddLearner implements Etcd.
func (e *ClientEtcd) AddLearner(ctx context.Context, endpoints []string, peerURL string) (uint64, error) {
	var id uint64
	err := e.call(ctx, endpoints, func(ctx context.Context, cli *clientv3.Client) error {
		resp, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
		if err == nil {
			id = resp.Member.ID
		}
		return err
	})
	return id, err
}

// learnerNotReady: the action is a promotion etcd refused because the
// learner has not caught up with the leader yet.
func learnerNotReady(a *Action, err error) bool {
	return a.Kind == PromoteMember && errors.Is(err, rpctypes.ErrMemberLearnerNotReady)
}

// Promote implements Etcd.
func (e *ClientEtcd) Promote(ctx context.Context, endpoints []string, id uint64) error {
	return e.call(ctx, endpoints, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.MemberPromote(ctx, id)
		return err
	})
}

// Remove implements Etcd.
func (e *ClientEtcd) Remove(ctx context.Context, endpoints []string, id uint64) error {
	return e.call(ctx, endpoints, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.MemberRemove(ctx, id)
		return err
	})
}

// MoveLeader implements Etcd.
func (e *ClientEtcd) MoveLeader(ctx context.Context, leaderEndpoint string, to uint64) error {
	return e.call(ctx, []string{leaderEndpoint}, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.MoveLeader(ctx, to)
		return err
	})
}

func (e *ClientEtcd) call(ctx context.Context, endpoints []string, f func(context.Context, *clientv3.Client) error) error {
	_, rt := e.timeouts()
	cli, err := e.client(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, rt)
	defer cancel()
	return f(ctx, cli)
}

// TLSFromSecret builds the etcd client TLS from a Secret with tls.crt,
// tls.key and ca.crt (VoterPolicy spec.etcd.clientCertSecretRef). Each
// missing or unreadable key is named with its field path.
func TLSFromSecret(s *corev1.Secret) (*tls.Config, error) {
	path := fmt.Sprintf("Secret %s/%s", s.Namespace, s.Name)
	var missing []string
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, corev1.ServiceAccountRootCAKey} {
		if len(s.Data[k]) == 0 {
			missing = append(missing, "data["+k+"]")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: %s: must be set (the etcd client certificate, its key and the etcd CA)", path, strings.Join(missing, ", "))
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%s: data[tls.crt], data[tls.key]: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data[corev1.ServiceAccountRootCAKey]) {
		return nil, fmt.Errorf("%s: data[ca.crt]: no PEM certificate", path)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// observeEndpoints are the client URLs of the members that answered last
// time, then the policy's (status.clientURLs, spec.etcd.endpoints) and the
// other members' URLs: a member
// added by a swap is reached when the policy's list is stale, and a paused
// one is asked last.
func observeEndpoints(p *holdfastv1.VoterPolicy, last EtcdView) []string {
	var eps []string
	add := func(u string) {
		if !slices.Contains(eps, u) {
			eps = append(eps, u)
		}
	}
	for _, m := range last.Members {
		if m.Answered {
			for _, u := range m.ClientURLs {
				add(u)
			}
		}
	}
	for _, u := range p.MemberEndpoints() {
		add(u)
	}
	for _, m := range last.Members {
		for _, u := range m.ClientURLs {
			add(u)
		}
	}
	return eps
}

package hubca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/identity"
)

// DefaultRefresh is how often a hub replica reads the CA Secret again (a
// rotation step reaches every replica within it) and reports the clusters
// whose certificates are of the previous CA.
const DefaultRefresh = 10 * time.Second

// ObservationMaxAge is how old a replica's report of the CA its spokes
// present may be for `hub ca rotate --finish` to rely on it.
const ObservationMaxAge = time.Minute

// observationPrefix starts the CA Secret keys where each hub replica
// reports, during PhasePromoted, per cluster that connected to it, whether
// its last certificate there was of the previous CA, and when.
const observationPrefix = "observed."

// observation is one replica's report.
type observation struct {
	At time.Time `json:"at"`
	// Previous is the fingerprint of the previous CA the report is about.
	Previous string `json:"previous"`
	// Clusters is, per cluster that connected to this replica, its last
	// handshake here.
	Clusters map[string]clusterObservation `json:"clusters"`
}

// clusterObservation is a cluster's last handshake with a replica: when,
// and whether its certificate was of the previous CA.
type clusterObservation struct {
	PreviousCA bool      `json:"previousCA"`
	At         time.Time `json:"at"`
}

// presented is the CA that signed the certificate a cluster last
// connected with, and when.
type presented struct {
	root string
	at   time.Time
}

// AuthorityOptions configure an Authority.
type AuthorityOptions struct {
	Client client.Client
	// Secret is the CA Secret.
	Secret types.NamespacedName
	// Replica names this hub replica in its reports.
	Replica string
	// Serving re-issues the hub's serving certificate from the current CA.
	Serving *ServingRotator
	// Refresh is how often the Secret is read again (DefaultRefresh when zero).
	Refresh time.Duration
	Clock   clock.PassiveClock
	Log     logr.Logger
}

// Authority is the hub CA as a running hub replica uses it: it signs with
// the current CA, trusts the client certificates of every CA of the Secret
// (both during a rotation), hands out their bundle to joining and renewing
// spokes, follows rotation steps without a restart, and reports which
// clusters still connect with a certificate of the previous CA.
type Authority struct {
	opts AuthorityOptions

	mu    sync.RWMutex
	trust *Trust
	pool  *x509.CertPool

	seenMu sync.Mutex
	seen   map[string]presented
}

// NewAuthority starts from trust (read by LoadOrCreate's caller) and the
// serving rotator issued from its current CA.
func NewAuthority(trust *Trust, opts AuthorityOptions) *Authority {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	a := &Authority{opts: opts, seen: map[string]presented{}}
	a.set(trust)
	return a
}

func (a *Authority) set(t *Trust) {
	a.mu.Lock()
	a.trust, a.pool = t, t.Pool()
	a.mu.Unlock()
	if a.opts.Serving != nil {
		a.opts.Serving.SetCA(t.Current, t.Intermediates())
	}
}

// Trust is the trust in force.
func (a *Authority) Trust() *Trust {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.trust
}

// SignClientCSR signs a spoke's certificate with the current CA.
func (a *Authority) SignClientCSR(csrPEM []byte, commonName string, organizations []string, uris []*url.URL, validity time.Duration) ([]byte, error) {
	return a.Trust().Current.SignClientCSR(csrPEM, commonName, organizations, uris, validity)
}

// TrustBundle is the bundle of every trusted CA, which joining and
// renewing spokes get.
func (a *Authority) TrustBundle() []byte { return a.Trust().Bundle() }

// TLSConfig is the hub's server TLS configuration (identity.ServerTLS):
// the serving certificate of the current CA, and client certificates
// verified against the CAs trusted at the time of each handshake.
func (a *Authority) TLSConfig() *tls.Config {
	base := identity.ServerTLS(a.opts.Serving.GetCertificate, nil)
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		a.mu.RLock()
		pool := a.pool
		a.mu.RUnlock()
		cfg := identity.ServerTLS(a.opts.Serving.GetCertificate, pool)
		cfg.VerifyConnection = a.observe
		return cfg, nil
	}
	return base
}

// observe remembers which CA signed the certificate a spoke connected with.
func (a *Authority) observe(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	chain := cs.VerifiedChains[0]
	spoke, err := identity.SpokeFromCertificate(chain[0])
	if err != nil {
		// Not a spoke (a person's certificate); the interceptors decide.
		return nil
	}
	a.seenMu.Lock()
	a.seen[spoke.Cluster] = presented{root: Fingerprint(chain[len(chain)-1]), at: a.opts.Clock.Now()}
	a.seenMu.Unlock()
	return nil
}

// observed is, per cluster that connected here, its last handshake: when,
// and whether its certificate was of the previous CA.
func (a *Authority) observed(previous string) map[string]clusterObservation {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	out := make(map[string]clusterObservation, len(a.seen))
	for cluster, p := range a.seen {
		out[cluster] = clusterObservation{PreviousCA: p.root == previous, At: p.at.UTC()}
	}
	return out
}

// Start reads the CA Secret every Refresh until ctx ends (a
// manager.Runnable on every replica).
func (a *Authority) Start(ctx context.Context) error {
	ticker := time.NewTicker(a.opts.Refresh)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := a.Refresh(ctx); err != nil {
				a.opts.Log.Error(err, "Reading the hub CA Secret failed; keeping the trust in force")
			}
		}
	}
}

// Refresh reads the CA Secret, puts a changed trust in force and, during
// PhasePromoted, reports the clusters presenting the previous CA.
func (a *Authority) Refresh(ctx context.Context) error {
	var secret corev1.Secret
	if err := a.opts.Client.Get(ctx, a.opts.Secret, &secret); err != nil {
		return fmt.Errorf("reading hub CA secret %s: %w", a.opts.Secret, err)
	}
	t, err := ParseTrust(secret.Data)
	if err != nil {
		return fmt.Errorf("hub CA secret %s: %w", a.opts.Secret, err)
	}
	if old := a.Trust(); !sameTrust(old, t) {
		a.opts.Log.Info("Hub CA trust changed", "phase", t.Phase, "current", Fingerprint(t.Current.Cert))
		a.set(t)
	}
	if t.Phase != PhasePromoted {
		return nil
	}
	return a.report(ctx, Fingerprint(t.Previous), secret.Data)
}

// report writes this replica's observation into the CA Secret (a merge
// patch of its own key, no conflict with the other replicas or with `hub ca
// rotate`) and removes the reports, in data, older than ObservationMaxAge
// or unreadable: those of replicas that are gone (each hub process reports
// under a name of its own), which no finish counts any more.
func (a *Authority) report(ctx context.Context, previous string, data map[string][]byte) error {
	now := a.opts.Clock.Now()
	own := observationKey(a.opts.Replica)
	value, err := json.Marshal(observation{At: now.UTC(), Previous: previous, Clusters: a.observed(previous)})
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"data": reportChanges(data, own, value, now)})
	if err != nil {
		return err
	}
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = a.opts.Secret.Namespace, a.opts.Secret.Name
	if err := a.opts.Client.Patch(ctx, secret, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("reporting the clusters presenting the previous CA: %w", err)
	}
	return nil
}

// reportChanges is the data of the merge patch that writes value under own
// and removes (a nil value) every other report in data older than
// ObservationMaxAge at now, or unreadable.
func reportChanges(data map[string][]byte, own string, value []byte, now time.Time) map[string]any {
	changes := map[string]any{own: value}
	for key, raw := range data {
		if !strings.HasPrefix(key, observationPrefix) || key == own {
			continue
		}
		var o observation
		if err := json.Unmarshal(raw, &o); err != nil || now.Sub(o.At) > ObservationMaxAge {
			changes[key] = nil
		}
	}
	return changes
}

var notKeyChar = regexp.MustCompile(`[^-._a-zA-Z0-9]`)

// observationKey is the Secret key of replica's report.
func observationKey(replica string) string {
	return observationPrefix + notKeyChar.ReplaceAllString(replica, "-")
}

// OldCAClusters reads the replicas' reports in the CA Secret's data: the
// clusters whose last handshake with any replica (the newest across the
// reports written within maxAge of now) was with a certificate of the
// previous CA, and how many replicas reported within maxAge of now. A
// cluster no replica saw since it started is not known here.
func OldCAClusters(data map[string][]byte, now time.Time, maxAge time.Duration) (clusters []string, reporting int, err error) {
	t, err := ParseTrust(data)
	if err != nil {
		return nil, 0, err
	}
	if t.Phase != PhasePromoted {
		return nil, 0, nil
	}
	previous := Fingerprint(t.Previous)
	newest := map[string]clusterObservation{}
	for key, value := range data {
		if !strings.HasPrefix(key, observationPrefix) {
			continue
		}
		var o observation
		if err := json.Unmarshal(value, &o); err != nil {
			return nil, 0, fmt.Errorf("reading %s: %w", key, err)
		}
		if o.Previous != previous || now.Sub(o.At) > maxAge {
			continue
		}
		reporting++
		for cluster, c := range o.Clusters {
			if n, ok := newest[cluster]; !ok || c.At.After(n.At) {
				newest[cluster] = c
			}
		}
	}
	for cluster, c := range newest {
		if c.PreviousCA {
			clusters = append(clusters, cluster)
		}
	}
	slices.Sort(clusters)
	return clusters, reporting, nil
}

func sameTrust(a, b *Trust) bool {
	if a.Phase != b.Phase || len(a.Trusted) != len(b.Trusted) {
		return false
	}
	if (a.Cross == nil) != (b.Cross == nil) || (a.Cross != nil && !a.Cross.Equal(b.Cross)) {
		return false
	}
	for i := range a.Trusted {
		if !a.Trusted[i].Equal(b.Trusted[i]) {
			return false
		}
	}
	return true
}

// Package join owns cluster registration at the hub: one-time bootstrap
// tokens (created by the platform team, stored hashed as Secrets in the hub
// namespace, expiring, revocable) and the Join call that turns such a token
// and a certificate signing request into a spoke client certificate.
package join

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Bootstrap token Secrets: their type, label and data keys. Only the SHA-256
// of the token's secret part is stored.
const (
	SecretType          corev1.SecretType = imperatorv1alpha1.Prefix + "bootstrap-token"
	TokenLabel                            = imperatorv1alpha1.Prefix + "bootstrap-token"
	secretNamePrefix                      = "imperator-bootstrap-token-"
	keyID                                 = "token-id"
	keySecretSHA256                       = "token-secret-sha256"
	keyExpiration                         = "expiration"
	keyCluster                            = "cluster-name"
	keyDescription                        = "description"
	keyUsedBy                             = "used-by"
	keyUsedAt                             = "used-at"
	keyUsedKey                            = "used-key-sha256"
	keyUsedRegistration                   = "used-registration-uid"
	tokenIDLength                         = 6
	tokenSecretLength                     = 16
	tokenAlphabet                         = "abcdefghijklmnopqrstuvwxyz0123456789"
	DefaultTokenTTL                       = 24 * time.Hour
)

var (
	tokenPattern   = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)
	tokenIDPattern = regexp.MustCompile(`^[a-z0-9]{6}$`)
)

// ValidTokenID reports whether id is shaped like a token ID (the part of a
// token before the dot).
func ValidTokenID(id string) bool { return tokenIDPattern.MatchString(id) }

// Errors of Consume. Each message says what the operator must do.
var (
	ErrMalformedToken = errors.New("bootstrap token is malformed: want <6 chars>.<16 chars> of [a-z0-9]")
	ErrUnknownToken   = errors.New("bootstrap token is unknown or revoked: ask the platform team for a new one")
	ErrExpiredToken   = errors.New("bootstrap token has expired: ask the platform team for a new one")
	ErrUsedToken      = errors.New("bootstrap token was already used: tokens are single-use, ask the platform team for a new one")
	ErrWrongCluster   = errors.New("bootstrap token is bound to another cluster name")
	ErrUnboundToken   = errors.New("the cluster is already registered at the hub: joining it again needs a token bound to its name (hub token create --cluster NAME)")
)

// TokenInfo describes a bootstrap token without its secret.
type TokenInfo struct {
	ID          string
	Expiration  time.Time
	ClusterName string
	Description string
	UsedBy      string
	UsedAt      time.Time
}

// CreateOptions shape a new token.
type CreateOptions struct {
	// TTL is how long the token can be used (DefaultTokenTTL when zero).
	TTL time.Duration
	// ClusterName, when set, is the only cluster name the token can join as.
	ClusterName string
	Description string
}

// Tokens manages bootstrap tokens in the hub namespace.
type Tokens struct {
	client    client.Client
	namespace string
	clock     clock.PassiveClock
}

// NewTokens manages the tokens of namespace with c (an uncached client is
// best: tokens are read rarely and Secrets should not be cached hub-wide).
func NewTokens(c client.Client, namespace string, clk clock.PassiveClock) *Tokens {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Tokens{client: c, namespace: namespace, clock: clk}
}

// Create stores a new token and returns it ("<id>.<secret>"); it is shown
// once and cannot be read back.
func (t *Tokens) Create(ctx context.Context, opts CreateOptions) (string, TokenInfo, error) {
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	id, err := randomString(tokenIDLength)
	if err != nil {
		return "", TokenInfo{}, err
	}
	secret, err := randomString(tokenSecretLength)
	if err != nil {
		return "", TokenInfo{}, err
	}
	info := TokenInfo{ID: id, Expiration: t.clock.Now().Add(ttl).UTC().Truncate(time.Second), ClusterName: opts.ClusterName, Description: opts.Description}
	obj := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      secretNamePrefix + id,
			Namespace: t.namespace,
			Labels:    map[string]string{TokenLabel: "true"},
		},
		Type: SecretType,
		Data: map[string][]byte{
			keyID:           []byte(id),
			keySecretSHA256: []byte(hashSecret(secret)),
			keyExpiration:   []byte(info.Expiration.Format(time.RFC3339)),
			keyCluster:      []byte(opts.ClusterName),
			keyDescription:  []byte(opts.Description),
		},
	}
	if err := t.client.Create(ctx, obj); err != nil {
		return "", TokenInfo{}, fmt.Errorf("creating bootstrap token secret: %w", err)
	}
	return id + "." + secret, info, nil
}

// List returns every token, sorted by ID.
func (t *Tokens) List(ctx context.Context) ([]TokenInfo, error) {
	var list corev1.SecretList
	if err := t.client.List(ctx, &list, client.InNamespace(t.namespace), client.MatchingLabels{TokenLabel: "true"}); err != nil {
		return nil, fmt.Errorf("listing bootstrap token secrets: %w", err)
	}
	out := make([]TokenInfo, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Type == SecretType {
			out = append(out, infoFrom(&list.Items[i]))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Revoke deletes the token with the given ID; revoking an unknown token is
// an error so that typos do not go unnoticed.
func (t *Tokens) Revoke(ctx context.Context, id string) error {
	if !ValidTokenID(id) {
		// Not a token's ID: no Secret of another kind is deleted by mistake.
		return fmt.Errorf("revoking bootstrap token %q: %w", id, ErrUnknownToken)
	}
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretNamePrefix + id, Namespace: t.namespace}}
	if err := t.client.Delete(ctx, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("revoking bootstrap token %q: %w", id, ErrUnknownToken)
		}
		return fmt.Errorf("revoking bootstrap token %q: %w", id, err)
	}
	return nil
}

// Consume checks token for clusterName and marks it used, atomically: of two
// concurrent joins with the same token (even on two hub replicas) one wins,
// the other gets ErrUsedToken. The Secret is kept, as a record of the join.
// With registered true (the cluster exists at the hub already) only a token
// bound to clusterName is accepted, so that an unbound token cannot take
// over an existing cluster's identity.
func (t *Tokens) Consume(ctx context.Context, token, clusterName string, registered bool) error {
	_, err := t.ConsumeForKey(ctx, token, clusterName, "", registered)
	return err
}

// JoinRetryWindow is how long after a join the same token and the same key
// (the same CSR public key) may join again: the spoke's retry after a lost
// response or a failed write of its credentials gets a certificate again
// instead of "token already used".
const JoinRetryWindow = 10 * time.Minute

// Use is what ConsumeForKey found: a first use of the token, or a retry of
// the join that first used it.
type Use struct {
	// Retry is true for the retry of a join by the same cluster name and
	// key within JoinRetryWindow.
	Retry bool
	// RegistrationUID is, on a retry, the ManagedCluster UID the first join
	// registered (BindRegistration); empty when it recorded none.
	RegistrationUID types.UID
}

// ConsumeForKey is Consume for a join whose CSR's public key has the
// SHA-256 keySHA256 (hex; see KeySHA256), recorded with the use. When the
// token was used, by the same cluster name and key, less than
// JoinRetryWindow ago, it returns a Use with Retry and the registration
// that first join recorded: the caller answers the join again only for that
// registration. Any other key is refused with ErrUsedToken.
func (t *Tokens) ConsumeForKey(ctx context.Context, token, clusterName, keySHA256 string, registered bool) (Use, error) {
	obj, err := t.get(ctx, token)
	if err != nil {
		return Use{}, err
	}
	info := infoFrom(obj)
	if info.UsedBy != "" {
		usedKey := obj.Data[keyUsedKey]
		if keySHA256 != "" && info.UsedBy == clusterName && subtle.ConstantTimeCompare(usedKey, []byte(keySHA256)) == 1 &&
			t.clock.Now().Before(info.UsedAt.Add(JoinRetryWindow)) {
			return Use{Retry: true, RegistrationUID: types.UID(obj.Data[keyUsedRegistration])}, nil
		}
		return Use{}, ErrUsedToken
	}
	if !t.clock.Now().Before(info.Expiration) {
		return Use{}, ErrExpiredToken
	}
	if info.ClusterName != "" && info.ClusterName != clusterName {
		return Use{}, ErrWrongCluster
	}
	if registered && info.ClusterName == "" {
		return Use{}, ErrUnboundToken
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	obj.Data[keyUsedBy] = []byte(clusterName)
	obj.Data[keyUsedAt] = []byte(t.clock.Now().UTC().Format(time.RFC3339))
	if keySHA256 != "" {
		obj.Data[keyUsedKey] = []byte(keySHA256)
	}
	if err := t.client.Patch(ctx, obj, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return Use{}, ErrUsedToken
		}
		return Use{}, fmt.Errorf("marking bootstrap token used: %w", err)
	}
	return Use{}, nil
}

// BindRegistration records, in the token clusterName used, the UID of the
// ManagedCluster its join registered or joined, so that a retry of that
// join (ConsumeForKey) is answered only while that registration is the
// cluster's: once the cluster is deregistered and registered again, the old
// token's holder cannot take the new registration over within the retry
// window. A token bound to another registration already is ErrUsedToken.
func (t *Tokens) BindRegistration(ctx context.Context, token, clusterName string, uid types.UID) error {
	obj, err := t.get(ctx, token)
	if err != nil {
		return err
	}
	if string(obj.Data[keyUsedBy]) != clusterName {
		return ErrUsedToken
	}
	switch bound := types.UID(obj.Data[keyUsedRegistration]); bound {
	case uid:
		return nil
	case "":
	default:
		return ErrUsedToken
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	obj.Data[keyUsedRegistration] = []byte(uid)
	if err := t.client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("recording the registration of bootstrap token: %w", err)
	}
	return nil
}

// get reads the Secret of token and checks its secret part: ErrMalformedToken
// before any read, ErrUnknownToken when there is no such token.
func (t *Tokens) get(ctx context.Context, token string) (*corev1.Secret, error) {
	id, secret, err := ParseToken(token)
	if err != nil {
		return nil, err
	}
	var obj corev1.Secret
	if err := t.client.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: secretNamePrefix + id}, &obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrUnknownToken
		}
		return nil, fmt.Errorf("reading bootstrap token secret: %w", err)
	}
	if obj.Type != SecretType || subtle.ConstantTimeCompare(obj.Data[keySecretSHA256], []byte(hashSecret(secret))) != 1 {
		return nil, ErrUnknownToken
	}
	if obj.Data == nil {
		obj.Data = map[string][]byte{}
	}
	return &obj, nil
}

// ParseToken splits a token into its ID and secret, or returns
// ErrMalformedToken; it reads nothing, so that a malformed token costs the
// hub cluster's API server nothing.
func ParseToken(token string) (id, secret string, err error) {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return "", "", ErrMalformedToken
	}
	return m[1], m[2], nil
}

// KeySHA256 is the hex SHA-256 of a DER SubjectPublicKeyInfo: how a token
// records the key it was used for.
func KeySHA256(subjectPublicKeyInfo []byte) string {
	sum := sha256.Sum256(subjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// Release undoes Consume when the join it allowed could not finish (the
// cluster could not be registered), so that the spoke can retry with the
// same one-time token. Only a token used by clusterName is released.
func (t *Tokens) Release(ctx context.Context, token, clusterName string) error {
	obj, err := t.get(ctx, token)
	if err != nil {
		return err
	}
	if string(obj.Data[keyUsedBy]) != clusterName {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(obj.Data, keyUsedBy)
	delete(obj.Data, keyUsedAt)
	delete(obj.Data, keyUsedKey)
	delete(obj.Data, keyUsedRegistration)
	if err := t.client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("releasing bootstrap token: %w", err)
	}
	return nil
}

func infoFrom(s *corev1.Secret) TokenInfo {
	info := TokenInfo{
		ID:          string(s.Data[keyID]),
		ClusterName: string(s.Data[keyCluster]),
		Description: string(s.Data[keyDescription]),
		UsedBy:      string(s.Data[keyUsedBy]),
	}
	// A missing or unreadable expiration reads as the zero time: expired.
	info.Expiration, _ = time.Parse(time.RFC3339, string(s.Data[keyExpiration]))
	info.UsedAt, _ = time.Parse(time.RFC3339, string(s.Data[keyUsedAt]))
	return info
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(tokenAlphabet)))
	for i := range b {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("generating bootstrap token: %w", err)
		}
		b[i] = tokenAlphabet[v.Int64()]
	}
	return string(b), nil
}

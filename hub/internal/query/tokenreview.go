package query

import (
	"context"
	"crypto/sha256"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// tokenUser is who a bearer token authenticates as.
type tokenUser struct {
	name   string
	uid    string
	groups []string
	extra  map[string]authorizationv1.ExtraValue
}

type authentication struct {
	user *tokenUser
	// refusal is why the token was refused (user is nil then).
	refusal string
}

// authenticate returns who token is, from the caches or a TokenReview (within
// the review rates unless the token was accepted lately), and caches the
// answer, accepted or refused, for the TTL.
func (a *TokenAuthorizer) authenticate(ctx context.Context, token string) (*tokenUser, error) {
	key := sha256.Sum256([]byte(token))
	if cached, ok := a.users.Get(key); ok {
		return cached.(authentication).user, nil
	}
	if cached, ok := a.refused.Get(key); ok {
		return nil, status.Errorf(codes.Unauthenticated, "the bearer token was refused by the hub cluster: %s", cached.(authentication).refusal)
	}
	if _, known := a.accepted.Get(key); !known {
		if err := a.allowReview(ctx); err != nil {
			return nil, err
		}
	}
	reviewCtx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := a.client.AuthenticationV1().TokenReviews().Create(reviewCtx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		// Not cached: the hub cluster's API may be back at the next call.
		// Logged: an operator sees a missing right (forbidden) here.
		// The caller is not authenticated yet: the API server's words
		// (its address, the hub's own identity and rights) are for the
		// hub's log, the caller learns only that it may retry.
		ctrl.LoggerFrom(ctx).Error(err, "Authenticating a bearer token failed")
		return nil, status.Error(codes.Unavailable, errReviewUnavailable)
	}
	auth := authentication{refusal: review.Status.Error}
	if review.Status.Authenticated {
		u := review.Status.User
		user := &tokenUser{name: u.Username, uid: u.UID, groups: slices.Clone(u.Groups)}
		if len(u.Extra) > 0 {
			user.extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
			for k, v := range u.Extra {
				user.extra[k] = authorizationv1.ExtraValue(v)
			}
		}
		auth.user = user
	} else if auth.refusal == "" {
		auth.refusal = "not authenticated"
	}
	if auth.user == nil {
		a.accepted.Remove(key)
		a.refused.Add(key, auth, a.ttl)
		return nil, status.Errorf(codes.Unauthenticated, "the bearer token was refused by the hub cluster: %s", auth.refusal)
	}
	a.users.Add(key, auth, a.ttl)
	a.accepted.Add(key, struct{}{}, max(acceptedMemory, a.ttl))
	return auth.user, nil
}

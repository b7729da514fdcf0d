package query

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

type decision struct {
	allowed bool
	reason  string
}

// reviewKey identifies one decision: the user as the API server sees it
// and the access asked. Every field is written with its length first, so
// that no name, group or extra value can be crafted to read as another
// user's fields (a separator byte can appear in an OIDC claim).
func (u *tokenUser) reviewKey(verb, resource, namespace string) string {
	var b strings.Builder
	field := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	for _, part := range []string{u.name, u.uid, verb, resource, namespace} {
		field(part)
	}
	groups := slices.Clone(u.groups)
	slices.Sort(groups)
	b.WriteString(strconv.Itoa(len(groups)))
	b.WriteByte('g')
	for _, g := range groups {
		field(g)
	}
	keys := make([]string, 0, len(u.extra))
	for k := range u.extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString(strconv.Itoa(len(keys)))
	b.WriteByte('x')
	for _, k := range keys {
		field(k)
		b.WriteString(strconv.Itoa(len(u.extra[k])))
		b.WriteByte('v')
		for _, v := range u.extra[k] {
			field(v)
		}
	}
	return b.String()
}

// allowed asks (or reuses) the SubjectAccessReview of verb on resource in
// namespace ("" for the whole fleet) and returns PermissionDenied, naming
// the access, when RBAC does not grant it.
func (c *tokenCaller) allowed(ctx context.Context, verb, resource, namespace string) error {
	key := c.user.reviewKey(verb, resource, namespace)
	d, ok := c.auth.decisions.Get(key)
	if !ok {
		if err := c.auth.allowAccessReview(c.user); err != nil {
			return err
		}
		reviewCtx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		review, err := c.auth.client.AuthorizationV1().SubjectAccessReviews().Create(reviewCtx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   c.user.name,
				UID:    c.user.uid,
				Groups: c.user.groups,
				Extra:  c.user.extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group:     FleetGroup,
					Resource:  resource,
					Verb:      verb,
					Namespace: namespace,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Authorizing a bearer token's call failed", "user", c.user.name)
			return status.Errorf(codes.Unavailable, "authorizing %q with the hub cluster (SubjectAccessReview): %v", c.user.name, err)
		}
		d = decision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
		c.auth.decisions.Add(key, d, c.auth.decisionTTL)
	}
	if got := d.(decision); !got.allowed {
		where := "across the fleet (a ClusterRoleBinding)"
		if namespace != "" {
			where = "in namespace " + namespace
		}
		msg := fmt.Sprintf("%q may not %s %s.%s %s", c.user.name, verb, resource, FleetGroup, where)
		if got.reason != "" {
			msg += ": " + got.reason
		}
		return status.Error(codes.PermissionDenied, msg)
	}
	return nil
}

// authorizeHoldNamespaces asks, for a token caller, verb on holds in each
// of namespaces (across the fleet when there are none): a holder bound in
// one namespace books and releases holds for it only. Certificate callers
// were decided by their role.
func authorizeHoldNamespaces(ctx context.Context, verb string, namespaces []string) error {
	caller, ok := tokenCallerOf(ctx)
	if !ok {
		return nil
	}
	if len(namespaces) == 0 {
		return caller.allowed(ctx, verb, ResourceHolds, "")
	}
	for _, ns := range namespaces {
		if err := caller.allowed(ctx, verb, ResourceHolds, ns); err != nil {
			return err
		}
	}
	return nil
}

package query

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// allowReview reports whether the caller in ctx may have a token reviewed
// now: within its source's rate first, then within the hub's.
func (a *TokenAuthorizer) allowReview(ctx context.Context) error {
	source := reviewSourceOf(ctx)
	a.sourcesMu.Lock()
	limiter, ok := a.sources.Get(source)
	if !ok {
		limiter = rate.NewLimiter(a.sourceRate, a.sourceBurst)
		a.sources.Add(source, limiter)
	}
	a.sourcesMu.Unlock()
	if !limiter.(*rate.Limiter).Allow() {
		return status.Errorf(codes.ResourceExhausted, "too many new bearer tokens from %s (more than %g a second): retry later with a token the hub has seen", source, float64(a.sourceRate))
	}
	if !a.reviews.Allow() {
		return status.Errorf(codes.ResourceExhausted, "the hub is authenticating more than %g new bearer tokens a second: retry later", float64(a.reviews.Limit()))
	}
	return nil
}

// allowAccessReview reports whether u's call may ask a SubjectAccessReview
// the decision cache does not answer.
func (a *TokenAuthorizer) allowAccessReview(u *tokenUser) error {
	key := strconv.Itoa(len(u.name)) + ":" + u.name + u.uid
	a.usersMu.Lock()
	limiter, ok := a.userReviews.Get(key)
	if !ok {
		limiter = rate.NewLimiter(DefaultUserAccessReviewRate, DefaultUserAccessReviewBurst)
		a.userReviews.Add(key, limiter)
	}
	a.usersMu.Unlock()
	if !limiter.(*rate.Limiter).Allow() {
		return status.Errorf(codes.ResourceExhausted, "%q asks the hub more than %d new authorization decisions a second: retry later", u.name, DefaultUserAccessReviewRate)
	}
	return nil
}

// reviewSourceOf is the source of the call in ctx as the hub's connection
// limits count it: an IPv4 address, the /64 of an IPv6 one ("" when
// unknown: all such calls share one source).
func reviewSourceOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host := p.Addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()
	}
	return ip.String()
}

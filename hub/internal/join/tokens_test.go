package join

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/schemes"
)

func TestConsume(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		opts       CreateOptions
		mangle     func(token string) string
		advance    time.Duration
		revoke     bool
		cluster    string
		registered bool
		consumeN   int
		wantErrs   []error
		wantUsage  string
	}{
		"first use joins, second is refused": {
			cluster: "a", consumeN: 2,
			wantErrs: []error{nil, ErrUsedToken}, wantUsage: "a",
		},
		"expired": {
			opts: CreateOptions{TTL: time.Hour}, advance: time.Hour, cluster: "a", consumeN: 1,
			wantErrs: []error{ErrExpiredToken},
		},
		"bound to another cluster": {
			opts: CreateOptions{ClusterName: "b"}, cluster: "a", consumeN: 1,
			wantErrs: []error{ErrWrongCluster},
		},
		"bound to this cluster": {
			opts: CreateOptions{ClusterName: "a"}, cluster: "a", consumeN: 1,
			wantErrs: []error{nil}, wantUsage: "a",
		},
		"unbound token for a registered cluster": {
			cluster: "a", registered: true, consumeN: 1,
			wantErrs: []error{ErrUnboundToken},
		},
		"bound token for a registered cluster": {
			opts: CreateOptions{ClusterName: "a"}, cluster: "a", registered: true, consumeN: 1,
			wantErrs: []error{nil}, wantUsage: "a",
		},
		"revoked": {
			revoke: true, cluster: "a", consumeN: 1,
			wantErrs: []error{ErrUnknownToken},
		},
		"wrong secret": {
			mangle:  func(tok string) string { return tok[:7] + strings.Repeat("0", 16) },
			cluster: "a", consumeN: 1,
			wantErrs: []error{ErrUnknownToken},
		},
		"malformed": {
			mangle:  func(string) string { return "not-a-token" },
			cluster: "a", consumeN: 1,
			wantErrs: []error{ErrMalformedToken},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakePassiveClock(start)
			tokens := NewTokens(emptyHubCluster(t), "hub", clk)
			token, info, err := tokens.Create(ctx, tc.opts)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if tc.revoke {
				if err := tokens.Revoke(ctx, info.ID); err != nil {
					t.Fatalf("Revoke: %v", err)
				}
			}
			if tc.mangle != nil {
				token = tc.mangle(token)
			}
			clk.SetTime(start.Add(tc.advance))
			for i := 0; i < tc.consumeN; i++ {
				if err := tokens.Consume(ctx, token, tc.cluster, tc.registered); !errors.Is(err, tc.wantErrs[i]) {
					t.Errorf("Consume #%d = %v, want %v", i+1, err, tc.wantErrs[i])
				}
			}
			list, err := tokens.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if tc.revoke {
				if len(list) != 0 {
					t.Errorf("List after revoke = %+v, want none", list)
				}
				return
			}
			if len(list) != 1 || list[0].UsedBy != tc.wantUsage {
				t.Errorf("List = %+v, want one token used by %q", list, tc.wantUsage)
			}
		})
	}
}

func TestTokenStoredHashed(t *testing.T) {
	ctx := context.Background()
	c := emptyHubCluster(t)
	token, _, err := NewTokens(c, "hub", nil).Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tokenPattern.MatchString(token) {
		t.Fatalf("token %q does not match %s", token, tokenPattern)
	}
	secretPart := strings.SplitN(token, ".", 2)[1]
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if strings.Contains(string(v), secretPart) {
				t.Errorf("secret %s key %s holds the token secret in clear", s.Name, k)
			}
		}
	}
	tokens := NewTokens(c, "hub", nil)
	if err := tokens.Revoke(ctx, "zzzzzz"); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Revoke(unknown) = %v, want ErrUnknownToken", err)
	}
	// A Secret that only shares the token Secrets' name prefix is no token.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretNamePrefix + "signing-key", Namespace: "hub"}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Revoke(ctx, "signing-key"); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Revoke(not a token ID) = %v, want ErrUnknownToken", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Errorf("Revoke deleted a Secret that is no token: %v", err)
	}
}

func TestReleaseLetsAFailedJoinRetryWithTheSameToken(t *testing.T) {
	ctx := context.Background()
	tokens := NewTokens(emptyHubCluster(t), "hub", nil)
	token, _, err := tokens.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Consume(ctx, token, "a", false); err != nil {
		t.Fatalf("first Consume() = %v", err)
	}
	// Another cluster's release leaves the token used by a.
	if err := tokens.Release(ctx, token, "b"); err != nil {
		t.Fatalf("Release(b) = %v", err)
	}
	if err := tokens.Consume(ctx, token, "a", false); !errors.Is(err, ErrUsedToken) {
		t.Fatalf("Consume() after Release(b) = %v, want %v", err, ErrUsedToken)
	}
	if err := tokens.Release(ctx, token, "a"); err != nil {
		t.Fatalf("Release(a) = %v", err)
	}
	if err := tokens.Consume(ctx, token, "a", false); err != nil {
		t.Fatalf("Consume() after Release(a) = %v, want the token usable again", err)
	}
	if err := tokens.Release(ctx, token[:7]+strings.Repeat("0", 16), "a"); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("Release() with a wrong secret = %v, want %v", err, ErrUnknownToken)
	}
}

func TestBindRegistrationTiesTheRetryToTheFirstJoinsRegistration(t *testing.T) {
	ctx := context.Background()
	tokens := NewTokens(emptyHubCluster(t), "hub", nil)
	token, _, err := tokens.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.ConsumeForKey(ctx, token, "a", "key", false); err != nil {
		t.Fatalf("ConsumeForKey() = %v", err)
	}
	if err := tokens.BindRegistration(ctx, token, "b", "uid-1"); !errors.Is(err, ErrUsedToken) {
		t.Errorf("BindRegistration() by a cluster that did not use the token = %v, want %v", err, ErrUsedToken)
	}
	for range 2 {
		if err := tokens.BindRegistration(ctx, token, "a", "uid-1"); err != nil {
			t.Fatalf("BindRegistration(uid-1) = %v", err)
		}
	}
	if err := tokens.BindRegistration(ctx, token, "a", "uid-2"); !errors.Is(err, ErrUsedToken) {
		t.Errorf("BindRegistration() to another registration = %v, want %v", err, ErrUsedToken)
	}
	use, err := tokens.ConsumeForKey(ctx, token, "a", "key", true)
	if err != nil {
		t.Fatalf("retried ConsumeForKey() = %v", err)
	}
	if diff := cmp.Diff(Use{Retry: true, RegistrationUID: "uid-1"}, use); diff != "" {
		t.Errorf("retried ConsumeForKey() (-want +got):\n%s", diff)
	}
	// A released token forgets its registration with its use.
	if err := tokens.Release(ctx, token, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.ConsumeForKey(ctx, token, "a", "key", false); err != nil {
		t.Fatal(err)
	}
	if use, err := tokens.ConsumeForKey(ctx, token, "a", "key", false); err != nil || use.RegistrationUID != "" {
		t.Errorf("retry after a release and a new use = %+v, %v; want no registration", use, err)
	}
}

// emptyHubCluster returns a client of a hub cluster with no objects yet.
func emptyHubCluster(t *testing.T) client.WithWatch {
	t.Helper()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

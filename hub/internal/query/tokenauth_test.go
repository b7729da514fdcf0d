package query

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Every Query method asks RBAC something for a token caller, and the same
// as it asks a certificate's role: a read for viewers, a hold write for
// holders, a token call for admins.
func TestEveryQueryMethodHasItsAccess(t *testing.T) {
	var names []string
	for _, m := range queryv1.Query_ServiceDesc.Methods {
		names = append(names, "/"+queryv1.Query_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for _, s := range queryv1.Query_ServiceDesc.Streams {
		names = append(names, "/"+queryv1.Query_ServiceDesc.ServiceName+"/"+s.StreamName)
	}
	for _, name := range names {
		want, ok := methodAccess[name]
		if !ok {
			t.Errorf("%s has no access for token callers", name)
			continue
		}
		role := methodRoles[name]
		var wantRole Role
		switch {
		case want.resource == ResourceTokens, want.resource == ResourceClusters && want.verb == "delete":
			wantRole = RoleAdmin
		case want.resource == ResourceHolds && (want.verb == "create" || want.verb == "delete"):
			wantRole = RoleHolder
		default:
			wantRole = RoleViewer
		}
		if role != wantRole {
			t.Errorf("%s: %s %s for tokens, but certificates need a %s (want %s)", name, want.verb, want.resource, role, wantRole)
		}
	}
}

// Decisions are cached per user as the API server sees it: another group
// set or extra value is another decision.
func TestReviewKeysTellUsersApart(t *testing.T) {
	base := tokenUser{name: "alice", uid: "1", groups: []string{"b", "a"}}
	same := tokenUser{name: "alice", uid: "1", groups: []string{"a", "b"}}
	if base.reviewKey("get", "clusters", "") != same.reviewKey("get", "clusters", "") {
		t.Error("the order of groups changes the key")
	}
	others := map[string]tokenUser{
		"another group": {name: "alice", uid: "1", groups: []string{"a", "c"}},
		"another uid":   {name: "alice", uid: "2", groups: []string{"a", "b"}},
		"extra scopes":  {name: "alice", uid: "1", groups: []string{"a", "b"}, extra: map[string]authorizationv1.ExtraValue{"scopes": {"read"}}},
	}
	for name, u := range others {
		if u.reviewKey("get", "clusters", "") == base.reviewKey("get", "clusters", "") {
			t.Errorf("%s: same key", name)
		}
	}
	if base.reviewKey("create", "holds", "team-a") == base.reviewKey("create", "holds", "team-b") {
		t.Error("namespaces share a key")
	}
}

// A user name, group or extra value holding what the key used to separate
// fields with cannot read as another user's fields: each field carries its
// length.
func TestReviewKeysCannotBeForgedBySeparators(t *testing.T) {
	cases := map[string][2]tokenUser{
		"name ending in the uid's separator": {
			{name: "alice\x001", uid: ""},
			{name: "alice", uid: "1\x00"},
		},
		"a group split in two": {
			{name: "bob", groups: []string{"a\x01b"}},
			{name: "bob", groups: []string{"a", "b"}},
		},
		"a group that reads as an extra": {
			{name: "bob", groups: []string{"x\x02y\x02"}},
			{name: "bob", extra: map[string]authorizationv1.ExtraValue{"x": {"y"}}},
		},
		"extra values joined": {
			{name: "bob", extra: map[string]authorizationv1.ExtraValue{"k": {"a\x03b"}}},
			{name: "bob", extra: map[string]authorizationv1.ExtraValue{"k": {"a", "b"}}},
		},
		"a name holding the verb": {
			{name: "carol\x00get"},
			{name: "carol"},
		},
		"digits in a name": {
			{name: "1:a", uid: ""},
			{name: "1", uid: ":a"},
		},
	}
	for name, users := range cases {
		t.Run(name, func(t *testing.T) {
			verb := [2]string{"get", "get"}
			if name == "a name holding the verb" {
				// "carol\x00get" asking list vs "carol" asking get\x00list.
				verb = [2]string{"list", "get\x00list"}
			}
			a, b := users[0].reviewKey(verb[0], "clusters", ""), users[1].reviewKey(verb[1], "clusters", "")
			if a == b {
				t.Errorf("two users share the decision key %q", a)
			}
		})
	}
}

// A certificate is the creator of the holds recorded with its kind and
// name, or with its bare name from before identities had kinds; never of a
// Kubernetes user's of the same name.
func TestCreatedBy(t *testing.T) {
	cases := map[string]struct {
		creator, commonName string
		want                bool
	}{
		"its own hold":                         {creator: CertificateCreator + "alice", commonName: "alice", want: true},
		"a hold of the Kubernetes user alice":  {creator: KubernetesCreator + "alice", commonName: "alice"},
		"another certificate's hold":           {creator: CertificateCreator + "bob", commonName: "alice"},
		"a bare creator of before the kinds":   {creator: "alice", commonName: "alice", want: true},
		"a certificate named like a user kind": {creator: KubernetesCreator + "alice", commonName: KubernetesCreator + "alice"},
		"a certificate named like a cert kind": {creator: CertificateCreator + "alice", commonName: CertificateCreator + "alice"},
		"its own hold, its name has a kind":    {creator: CertificateCreator + KubernetesCreator + "alice", commonName: KubernetesCreator + "alice", want: true},
		"an empty creator":                     {creator: "", commonName: "alice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := createdBy(tc.creator, tc.commonName); got != tc.want {
				t.Errorf("createdBy(%q, %q) = %v, want %v", tc.creator, tc.commonName, got, tc.want)
			}
		})
	}
}

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
		case want.resource == ResourceTokens:
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

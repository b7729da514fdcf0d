package hosted

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// clusterWithID is a member client whose cluster's kube-system namespace has
// uid.
func clusterWithID(t *testing.T, uid types.UID) *member {
	t.Helper()
	c := fakeManagement(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem, UID: uid}})
	done := make(chan struct{})
	close(done)
	return &member{Member: &Member{Client: c}, cancel: func() {}, done: done}
}

// TestSecondSecretOfAClusterIsRefusedNamingBoth: two member Secrets whose
// kubeconfigs reach one cluster (the same kube-system UID) are not both
// served: the second is refused with a Warning naming both Secrets, and is
// served once the first is removed; removing the refused Secret does not
// touch the cluster the first one serves.
func TestSecondSecretOfAClusterIsRefusedNamingBoth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	removed := 0
	p, err := New(Options{Namespace: "members", Scheme: mustSpokeScheme(t), Removed: func(context.Context, *Member) { removed++ }})
	if err != nil {
		t.Fatal(err)
	}
	recorder := events.NewFakeRecorder(10)
	p.ctx, p.recorder = ctx, recorder

	claim := func(secret string, m *member) bool {
		m.Name, m.Secret = secret, types.NamespacedName{Namespace: "members", Name: secret}
		p.mu.Lock()
		p.members[multicluster.ClusterName(secret)] = m
		p.mu.Unlock()
		return p.identifyAndClaim(ctx, multicluster.ClusterName(secret), m, logr.Discard())
	}
	if !claim("edge-1", clusterWithID(t, "cluster-a")) {
		t.Fatal("the first Secret of a cluster was refused")
	}
	if !claim("edge-9", clusterWithID(t, "cluster-b")) {
		t.Fatal("the Secret of another cluster was refused")
	}
	if claim("edge-1-again", clusterWithID(t, "cluster-a")) {
		t.Fatal("a second Secret of the same cluster is served")
	}
	if _, err := p.Get(ctx, "edge-1-again"); err == nil {
		t.Error("the refused member is handed to the controllers")
	}
	select {
	case e := <-recorder.Events:
		for _, want := range []string{"Warning InvalidMember", "members/edge-1-again", "members/edge-1 ", "cluster-a"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q does not say %q", e, want)
			}
		}
	default:
		t.Fatal("no event on the refused Secret")
	}

	p.retire(ctx, "edge-1-again", logr.Discard())
	if removed != 0 {
		t.Fatal("removing the refused Secret deleted what the serving member set up in the cluster")
	}
	if claim("edge-1-again", clusterWithID(t, "cluster-a")) {
		t.Fatal("refused Secret served after its own removal, while the first still serves the cluster")
	}
	<-recorder.Events

	p.retire(ctx, "edge-1", logr.Discard())
	if removed != 1 {
		t.Errorf("Removed ran %d times for the serving member, want 1", removed)
	}
	select {
	case e := <-p.retry:
		if e.Object.GetName() != "edge-1-again" {
			t.Errorf("reconciled %s again, want the refused edge-1-again", e.Object.GetName())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the refused Secret is not reconciled again once the cluster is free")
	}
	if !claim("edge-1-again", clusterWithID(t, "cluster-a")) {
		t.Fatal("the refused Secret is not served once the cluster is free")
	}
}

// TestSecretPointedAtAnotherClusterUndoesTheFirst: a member Secret whose
// kubeconfig is changed to reach another cluster has what the agent set up
// in the cluster it served before removed (its webhook configurations, whose
// failure policy Fail would otherwise keep calling an agent that no longer
// answers for it), once, and before that cluster is free for another Secret;
// a Secret changed but still reaching its cluster (new credentials) has
// nothing removed.
func TestSecretPointedAtAnotherClusterUndoesTheFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var removed []string
	var p *Provider
	p, err := New(Options{Namespace: "members", Scheme: mustSpokeScheme(t), Removed: func(_ context.Context, m *Member) {
		p.mu.RLock()
		holder := p.identities["cluster-a"]
		p.mu.RUnlock()
		removed = append(removed, m.Name+" (cluster-a held by "+string(holder)+")")
	}})
	if err != nil {
		t.Fatal(err)
	}
	p.ctx, p.recorder = ctx, events.NewFakeRecorder(10)
	claim := func(secret, memberName string, m *member) bool {
		m.Name, m.Secret = memberName, types.NamespacedName{Namespace: "members", Name: secret}
		p.mu.Lock()
		p.members[multicluster.ClusterName(secret)] = m
		p.mu.Unlock()
		return p.identifyAndClaim(ctx, multicluster.ClusterName(secret), m, logr.Discard())
	}
	if !claim("edge-1", "edge-1-first", clusterWithID(t, "cluster-a")) {
		t.Fatal("the Secret's first cluster was refused")
	}
	if !claim("edge-1", "edge-1-new-credentials", clusterWithID(t, "cluster-a")) {
		t.Fatal("the Secret's cluster was refused after a change of credentials")
	}
	if len(removed) != 0 {
		t.Fatalf("a change of credentials removed %v", removed)
	}
	if !claim("edge-1", "edge-1-moved", clusterWithID(t, "cluster-b")) {
		t.Fatal("the Secret's new cluster was refused")
	}
	if want := []string{"edge-1-new-credentials (cluster-a held by edge-1)"}; strings.Join(removed, ";") != strings.Join(want, ";") {
		t.Errorf("removed %v, want %v: the cluster the Secret served, while no other Secret serves it", removed, want)
	}
	if !claim("edge-2", "edge-2", clusterWithID(t, "cluster-a")) {
		t.Fatal("the cluster the Secret left is not free for another Secret")
	}
	p.retire(ctx, "edge-1", logr.Discard())
	if len(removed) != 2 || !strings.HasPrefix(removed[1], "edge-1-moved ") {
		t.Errorf("retiring the moved Secret removed %v, want its member of cluster-b only", removed)
	}
}

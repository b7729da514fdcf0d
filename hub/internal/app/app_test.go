package app

import (
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/internal/schemes"
)

// TestHubCachesOnlyHeartbeatLeasesAndItsFleetHolds: the hub's cache must not
// hold every Lease or Secret of the hub cluster (memory, and RBAC it does not
// have), and tests running several hubs in one process must be able to.
func TestHubCachesOnlyHeartbeatLeasesAndItsFleetHolds(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Namespace = "hub-system"
	for _, shared := range []bool{false, true} {
		opts := managerOptions(cfg, scheme, Options{SharedProcess: shared})
		kinds := map[string]bool{}
		for obj := range opts.Cache.ByObject {
			kinds[reflect.TypeOf(obj).Elem().Name()] = true
		}
		want := map[string]bool{
			reflect.TypeFor[coordinationv1.Lease]().Name():        true,
			reflect.TypeFor[imperatorv1alpha1.FleetHold]().Name(): true,
		}
		if !reflect.DeepEqual(kinds, want) {
			t.Errorf("restricted caches %v, want %v", kinds, want)
		}
		if _, ok := opts.Cache.ByObject[client.Object(&corev1.Secret{})]; ok {
			t.Error("the hub caches Secrets; it reads them directly")
		}
		for obj, by := range opts.Cache.ByObject {
			if _, ok := obj.(*imperatorv1alpha1.FleetHold); ok {
				if _, in := by.Namespaces["hub-system"]; !in || len(by.Namespaces) != 1 {
					t.Errorf("fleet holds cached in %v, want only the hub's namespace", by.Namespaces)
				}
			}
			if _, ok := obj.(*coordinationv1.Lease); ok && !selective(by) {
				t.Error("every Lease of the hub cluster is cached, not only the spokes' heartbeats")
			}
		}
		if got := opts.Controller.SkipNameValidation; got == nil || *got != shared {
			t.Errorf("SharedProcess %v: SkipNameValidation %v", shared, got)
		}
		if opts.Metrics.BindAddress != cfg.MetricsAddr || opts.HealthProbeBindAddress != cfg.HealthAddr {
			t.Errorf("metrics on %q and probes on %q, want the flags' %q and %q", opts.Metrics.BindAddress, opts.HealthProbeBindAddress, cfg.MetricsAddr, cfg.HealthAddr)
		}
	}
}

// TestOnlyAnElectedReplicaCampaigns: without --leader-elect the only replica
// always leads (no campaign, and nothing to ask whether it leads); with it the
// replica campaigns for the hub's Lease under its replica name.
func TestOnlyAnElectedReplicaCampaigns(t *testing.T) {
	cfg := config.Default()
	cfg.LeaderElect = false
	if campaign, leading := leaderCampaign(cfg, &rest.Config{}, "hub-0_ab", logr.Discard()); campaign != nil || leading != nil {
		t.Fatalf("the only replica campaigns: %v", campaign)
	}
	cfg.LeaderElect = true
	cfg.Namespace = "hub-system"
	campaign, leading := leaderCampaign(cfg, &rest.Config{}, "hub-0_ab", logr.Discard())
	if campaign == nil || leading == nil {
		t.Fatal("an elected replica does not campaign")
	}
	if campaign.Namespace != "hub-system" || campaign.Name != config.LeaderElectionID || campaign.Identity != "hub-0_ab" {
		t.Errorf("campaign for %s/%s as %s, want hub-system/%s as hub-0_ab", campaign.Namespace, campaign.Name, campaign.Identity, config.LeaderElectionID)
	}
	if leading() {
		t.Error("leads before the campaign started")
	}
}

// TestReplicasHaveDistinctNames: a restarted replica must not be mistaken for
// its previous run, which the persisted figures name.
func TestReplicasHaveDistinctNames(t *testing.T) {
	first, err := replicaID()
	if err != nil {
		t.Fatal(err)
	}
	second, err := replicaID()
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Errorf("two runs are both named %q", first)
	}
	if host, _, _ := strings.Cut(first, "_"); host == "" {
		t.Errorf("replica name %q does not start with the host name", first)
	}
}

// TestMetricsGoWhereTheManagerServesThem: without a registerer of its own the
// hub registers its metrics where controller-runtime's metrics server serves
// them.
func TestMetricsGoWhereTheManagerServesThem(t *testing.T) {
	if registerer(Options{}) != ctrlmetrics.Registry {
		t.Error("the hub's metrics do not go to controller-runtime's registry")
	}
	own := prometheus.NewRegistry()
	if registerer(Options{Registerer: own}) != own {
		t.Error("Options.Registerer is ignored")
	}
}

// selective says whether by caches only selected objects: by a field or a
// label, everywhere or in each namespace it names.
func selective(by cache.ByObject) bool {
	if by.Field != nil || by.Label != nil {
		return true
	}
	if len(by.Namespaces) == 0 {
		return false
	}
	for _, ns := range by.Namespaces {
		if ns.FieldSelector == nil && ns.LabelSelector == nil {
			return false
		}
	}
	return true
}

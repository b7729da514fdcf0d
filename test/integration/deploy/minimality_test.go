package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// rbacEnv is what the specs of the RBAC container share; its BeforeAll fills
// the objects, the Describe body the argument builders.
type rbacEnv struct {
	spokeObjs, hubObjs []*unstructured.Unstructured
	spokeArgs          func(extra ...string) []string
	hubArgs            func() []string
	hubAddress         func() string
	hubCAFile          string
}

// ruleNeed is one generated RBAC rule and the scenario that breaks without it.
type ruleNeed struct {
	// side is "spoke" or "hub"; kind is ClusterRole or Role.
	side, kind string
	// resource is the rule's first resource, resourceName its first
	// resourceName if it has any: together they name the rule.
	resource, resourceName string
	// apiGroup, when set, is the rule's first API group: it tells apart
	// rules of the same first resource in two groups (podgroups).
	apiGroup string
	// verb, when set, is the only thing taken away: the rule keeps its
	// other verbs. It is for a verb that one use needs on a rule that other
	// uses need whole (taking the whole rule away would show only those).
	// Such an entry comes on top of the rule's own.
	verb string
	// group: the rules of one group are taken away together and their
	// scenarios checked in one run of the binary; their failures must not
	// hide each other.
	group string
	// scenario is what a user would see break.
	scenario string
	// forbidden matches the error the binary logs; alsoForbidden the
	// others it must log too, for a rule whose resources serve uses that
	// fail each on its own.
	forbidden     string
	alsoForbidden []string
}

// forbiddenFor is the pattern of the API server's answer when side's
// ServiceAccount may not do one of verbs on resource (both patterns).
func forbiddenFor(side, verbs, resource string) string {
	return fmt.Sprintf(`is forbidden: User "system:serviceaccount:imperator-system:imperator-%s" cannot (%s) resource "%s"`,
		side, verbs, resource)
}

// ruleNeeds maps every rule of deploy/spoke/rbac and deploy/hub/rbac to a
// scenario. A rule without an entry fails the completeness spec: either it
// gets a scenario here or it is removed from the markers.
var ruleNeeds = []ruleNeed{
	// The agent's start-up: its webhook certificate.
	{side: "spoke", kind: "Role", resource: "secrets", group: "spoke-certificate",
		scenario:  "the agent cannot keep its webhook serving certificate, so no webhook is served",
		forbidden: forbiddenFor("spoke", "get", "secrets")},
	{side: "spoke", kind: "ClusterRole", resource: "mutatingwebhookconfigurations", resourceName: "imperator-pod-injector", group: "spoke-ca-bundle",
		scenario:  "the API server cannot trust the pod injector: guest pods are refused",
		forbidden: forbiddenFor("spoke", "get|patch", "mutatingwebhookconfigurations")},
	{side: "spoke", kind: "ClusterRole", resource: "validatingwebhookconfigurations", resourceName: "imperator-machine-validator", group: "spoke-ca-bundle",
		scenario:  "the API server cannot trust the Machine validator: Machine writes are refused",
		forbidden: forbiddenFor("spoke", "get|patch", "validatingwebhookconfigurations")},
	{side: "spoke", kind: "Role", resource: "leases", group: "spoke-leader",
		scenario:  "no replica becomes leader: no controller runs",
		forbidden: forbiddenFor("spoke", "get|create", "leases")},
	// The controllers' informers, one group each: a controller starts its
	// watches one after the other, so one that cannot list hides the next.
	{side: "spoke", kind: "ClusterRole", resource: "namespaces", group: "spoke-informer-namespaces",
		scenario:  "guests are not counted: Machine status stays empty",
		forbidden: forbiddenFor("spoke", "list|watch", "namespaces")},
	// Pods share the nodes rule (get, list, watch, patch): the agent removes
	// the slot gate of the guests it grants a unit to.
	{side: "spoke", kind: "ClusterRole", resource: "nodes", group: "spoke-informer-nodes",
		scenario:  "node pools are not labelled or tainted, guests and reservations are not counted and no guest is let through the slot gate",
		forbidden: forbiddenFor("spoke", "list|watch", "nodes")},
	{side: "spoke", kind: "ClusterRole", resource: "machines", group: "spoke-informer-machines",
		scenario:  "no Machine is reconciled, and the validator cannot see other Machines",
		forbidden: forbiddenFor("spoke", "list|watch", "machines")},
	// One rule with the native PodGroups (podgroups sorts first): the
	// PriorityClass watch starts before the PodGroup one, and its failure
	// is what the agent logs.
	{side: "spoke", kind: "ClusterRole", resource: "podgroups", apiGroup: "scheduling.k8s.io", group: "spoke-informer-priorityclasses",
		scenario:  "the reservation PriorityClass deploy/spoke ships cannot be read: nothing is reserved (nor are native PodGroups followed)",
		forbidden: forbiddenFor("spoke", "list|watch", "priorityclasses")},
	// Watched when the cluster serves the coscheduling PodGroup CRD at the
	// agent's start, as the suite's does.
	{side: "spoke", kind: "ClusterRole", resource: "podgroups", apiGroup: "scheduling.x-k8s.io", group: "spoke-informer-coscheduling-podgroups",
		scenario:  "gangs of coscheduling PodGroups without gang-size get no size: they wait, parked",
		forbidden: forbiddenFor("spoke", "list|watch", "podgroups") + ` in API group "scheduling.x-k8s.io"`},
	// Watched when the cluster serves the ProvisioningRequest CRD at the
	// agent's start, as the suite's does.
	{side: "spoke", kind: "ClusterRole", resource: "provisioningrequests", group: "spoke-informer-provisioningrequests",
		scenario:  "ProvisioningRequests of the class capacity-hold.imperator.tenzen-y.io are not served: Kueue never admits a Job through them",
		forbidden: forbiddenFor("spoke", "list|watch", "provisioningrequests") + ` in API group "autoscaling.x-k8s.io"`},
	{side: "spoke", kind: "ClusterRole", resource: "provisioningrequests/status", group: "spoke-provisioningrequest-status",
		scenario:  "a ProvisioningRequest of the class is never told Provisioned or Failed: Kueue waits forever",
		forbidden: forbiddenFor("spoke", "patch", "provisioningrequests/status") + ` in API group "autoscaling.x-k8s.io"`},
	// Injection by admission policy (--injection=policy): the agent binds
	// the injection policies to each Machine.
	{side: "spoke", kind: "ClusterRole", resource: "mutatingadmissionpolicybindings", group: "spoke-injection-policy",
		scenario:  "with --injection=policy no guest is injected: the agent cannot bind the injection policies to its Machines",
		forbidden: forbiddenFor("spoke", "get|list|watch|create|patch", "(mutating|validating)admissionpolicybindings")},
	{side: "spoke", kind: "Role", resource: "services", group: "spoke-informer-services",
		scenario:  "reservation Services are not kept",
		forbidden: forbiddenFor("spoke", "list|watch", "services")},
	{side: "spoke", kind: "Role", resource: "statefulsets", group: "spoke-informer-statefulsets",
		scenario:  "reservation StatefulSets are not kept: nothing is reserved",
		forbidden: forbiddenFor("spoke", "list|watch", "statefulsets")},
	// One rule with MachineNodePools (capacityholds sorts first). Without
	// it the agent does not start: at start-up it retires the original
	// Imperator's MachineNodePools, and cannot list them; so the
	// CapacityHold watch, which would fail too, is never reached.
	{side: "spoke", kind: "ClusterRole", resource: "capacityholds", group: "spoke-informer-capacityholds",
		scenario:  "the agent does not start (it cannot retire the original Imperator's MachineNodePools): a Machine gets no MachineNodePool, capacity holds are not decided, and the hub's fleet holds cannot be placed on the cluster",
		forbidden: `retiring the original's MachineNodePools: listing MachineNodePools: .*` + forbiddenFor("spoke", "list", "machinenodepools")},
	// The migration preflight at start-up (spoke/internal/migrate): it
	// logs a check it has no right to make and goes on, so all four lists
	// fail in one run.
	{side: "spoke", kind: "ClusterRole", resource: "deployments", group: "spoke-migrate-preflight",
		scenario:  "the migration preflight cannot see whether the original Imperator's controller still runs, nor find its reservation StatefulSets: the agent would start beside it, two mutators on every pod",
		forbidden: `Migration preflight could not check everything.*` + forbiddenFor("spoke", "list", "deployments") + ` in API group "apps" at the cluster scope`,
		alsoForbidden: []string{
			`Migration preflight could not check everything.*` + forbiddenFor("spoke", "list", "statefulsets") + ` in API group "apps" at the cluster scope`,
		}},
	{side: "spoke", kind: "ClusterRole", resource: "mutatingwebhookconfigurations", group: "spoke-migrate-preflight",
		scenario:  "the migration preflight cannot see whether the original Imperator's webhooks are still registered: its pod mutator would run beside the agent's",
		forbidden: `Migration preflight could not check everything.*` + forbiddenFor("spoke", "list", "mutatingwebhookconfigurations"),
		alsoForbidden: []string{
			`Migration preflight could not check everything.*` + forbiddenFor("spoke", "list", "validatingwebhookconfigurations"),
		}},
	// Adoption of a Machine annotated adopt-original (migrate.Adopter):
	// verbs that only it uses, on rules the controllers need whole.
	{side: "spoke", kind: "ClusterRole", resource: "machines", verb: "patch", group: "spoke-migrate-adoption",
		scenario:  "a Machine's adoption from the original Imperator never records how far it has gone (the adoption annotation)",
		forbidden: `writing the adoption progress on Machine minimal-migrate-adoption: .*` + forbiddenFor("spoke", "patch", "machines")},
	{side: "spoke", kind: "ClusterRole", resource: "capacityholds", verb: "delete", group: "spoke-migrate-adoption",
		scenario:  "the original Imperator's MachineNodePool of an adopted Machine's group is never removed",
		forbidden: `deleting MachineNodePool minimal-migrate-adoption-original: .*` + forbiddenFor("spoke", "delete", "machinenodepools")},
	// The controllers' writes for a new Machine. Events follow successful
	// writes only, so they are a group of their own.
	{side: "spoke", kind: "ClusterRole", resource: "events", group: "spoke-events",
		scenario:  "a Machine's reservations and node pool changes leave no events",
		forbidden: forbiddenFor("spoke", "create|patch", "events") + ` in API group "events.k8s.io"`},
	{side: "spoke", kind: "ClusterRole", resource: "podgroups/status", group: "spoke-podgroup-status",
		scenario:  "a native PodGroup whose gang waits at the slot gate is not told why",
		forbidden: forbiddenFor("spoke", "patch", "podgroups/status") + ` in API group "scheduling.k8s.io"`},
	{side: "spoke", kind: "ClusterRole", resource: "capacityholds/status", group: "spoke-writes",
		scenario:  "a Machine's status (usage, Ready) is never written",
		forbidden: forbiddenFor("spoke", "patch", "machines/status")},
	// Only under OwnerReferencesPermissionEnforcement, which the suite's API
	// server enables as some distributions do.
	{side: "spoke", kind: "ClusterRole", resource: "machines/finalizers", group: "spoke-writes",
		scenario:  "a Machine's reservations and node pool cannot be owned by it where owner references are enforced",
		forbidden: `can't set finalizers on`},

	// The hub's start-up.
	{side: "hub", kind: "Role", resource: "secrets", group: "hub-ca",
		scenario:  "the hub cannot load its CA: it does not start",
		forbidden: forbiddenFor("hub", "get|list|create", "secrets")},
	{side: "hub", kind: "Role", resource: "configmaps", group: "hub-revocations",
		scenario:  "the hub cannot read its revocation list: it does not start",
		forbidden: forbiddenFor("hub", "get|create", "configmaps")},
	{side: "hub", kind: "ClusterRole", resource: "clusterinventories", group: "hub-inventories",
		scenario:  "the hub cannot restore or follow inventories: it does not start",
		forbidden: forbiddenFor("hub", "list|watch|get", "clusterinventories")},
	{side: "hub", kind: "ClusterRole", resource: "managedclusters", group: "hub-registry",
		scenario:  "the hub cannot read the cluster registry: it does not start",
		forbidden: forbiddenFor("hub", "list|watch|get", "managedclusters")},
	{side: "hub", kind: "ClusterRole", resource: "addonplacementscores", group: "hub-scores",
		scenario:  "the leader cannot follow placement scores",
		forbidden: forbiddenFor("hub", "list|watch|get", "addonplacementscores")},
	{side: "hub", kind: "ClusterRole", resource: "leases", resourceName: "imperator-spoke", group: "hub-follow-leases",
		scenario:  "replicas cannot follow which replica serves a cluster",
		forbidden: forbiddenFor("hub", "list|watch|get", "leases")},
	// The hub namespace's Leases are the leader's and the replicas' own
	// (persist.ReplicaLeaseName): a replica starting lists the others'
	// before it restores the inventories, so without the rule it refuses
	// to start, and none would become leader either.
	{side: "hub", kind: "Role", resource: "leases", group: "hub-leader",
		scenario:  "no hub replica starts (it cannot see which replicas run) nor becomes leader: no scores, no Unknown marking",
		forbidden: forbiddenFor("hub", "list|get|create", "leases") + ` in API group "coordination.k8s.io" in the namespace "imperator-system"`},
	// Fleet holds: the expiry controller follows them from the start; a
	// Held one past validUntil, created by the admin, is recorded Expired.
	{side: "hub", kind: "Role", resource: "fleetholds", group: "hub-fleetholds",
		scenario:  "fleet holds cannot be created, listed or released, and never turn Expired",
		forbidden: forbiddenFor("hub", "list|watch", "fleetholds")},
	{side: "hub", kind: "Role", resource: "fleetholds/status", group: "hub-fleethold-status",
		scenario:  "a fleet hold's phase is never recorded: it stays Held past validUntil",
		forbidden: forbiddenFor("hub", "patch", "fleetholds/status")},
	// A new spoke joining and reporting. The persister writes the
	// ManagedCluster's status before the inventory's: one group each.
	{side: "hub", kind: "ClusterRole", resource: "namespaces", group: "hub-join",
		scenario:  "a new spoke cannot join: its namespace is not created",
		forbidden: forbiddenFor("hub", "get|create", "namespaces")},
	{side: "hub", kind: "ClusterRole", resource: "leases", group: "hub-heartbeat-lease",
		scenario:  "a new spoke's heartbeat Lease is not created: other replicas never see it live",
		forbidden: forbiddenFor("hub", "create", "leases")},
	{side: "hub", kind: "ClusterRole", resource: "clusterinventories/status", group: "hub-inventory-status",
		scenario:  "a spoke's inventory is not persisted: other replicas and restarts lose it",
		forbidden: forbiddenFor("hub", "patch", "clusterinventories/status")},
	{side: "hub", kind: "ClusterRole", resource: "addonplacementscores/status", group: "hub-report",
		scenario:  "placement scores and ManagedCluster conditions are not written",
		forbidden: forbiddenFor("hub", "patch", "(managedclusters|addonplacementscores)/status")},
}

// ruleKey names a rule as ruleNeed does.
func ruleKey(kind string, rule map[string]any) string {
	resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
	names, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
	key := kind + " " + resources[0]
	if len(names) > 0 {
		key += "/" + names[0]
	}
	return key
}

func (n ruleNeed) key() string {
	key := n.kind + " " + n.resource
	if n.resourceName != "" {
		key += "/" + n.resourceName
	}
	return key
}

// name is the rule's key, and the verb taken away if only one is.
func (n ruleNeed) name() string {
	if n.verb != "" {
		return n.key() + " (" + n.verb + ")"
	}
	return n.key()
}

// withoutRules returns copies of roles with the rules of needs removed, or
// only the verb of a need that names one.
func withoutRules(roles []*unstructured.Unstructured, needs []ruleNeed) []*unstructured.Unstructured {
	GinkgoHelper()
	drop := map[string][]ruleNeed{}
	for _, n := range needs {
		drop[n.key()] = append(drop[n.key()], n)
	}
	// matching is the need of needs that names rule, if any.
	matching := func(kind string, rule map[string]any) (ruleNeed, bool) {
		groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
		i := slices.IndexFunc(drop[ruleKey(kind, rule)], func(n ruleNeed) bool {
			return n.apiGroup == "" || (len(groups) > 0 && groups[0] == n.apiGroup)
		})
		if i < 0 {
			return ruleNeed{}, false
		}
		return drop[ruleKey(kind, rule)][i], true
	}
	var out []*unstructured.Unstructured
	removed := 0
	for _, role := range roles {
		role = role.DeepCopy()
		rules, _, err := unstructured.NestedSlice(role.Object, "rules")
		Expect(err).NotTo(HaveOccurred())
		var kept []any
		for _, r := range rules {
			rule := r.(map[string]any)
			n, ok := matching(role.GetKind(), rule)
			switch {
			case !ok:
				kept = append(kept, rule)
			case n.verb == "":
				removed++
			default:
				verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
				Expect(verbs).To(ContainElement(n.verb), "%s: the generated rule no longer has the verb", n.name())
				Expect(unstructured.SetNestedStringSlice(rule, slices.DeleteFunc(verbs, func(v string) bool { return v == n.verb }), "verbs")).To(Succeed())
				removed++
				kept = append(kept, rule)
			}
		}
		Expect(unstructured.SetNestedSlice(role.Object, kept, "rules")).To(Succeed())
		out = append(out, role)
	}
	Expect(removed).To(Equal(len(needs)), "rules of %v not found", needs)
	return out
}

// minimalitySpecs checks that every generated rule is needed: taken away (with
// the others of its group), the binary logs the forbidden error of a named
// scenario. It runs after the journey: the spoke-a agent has joined.
func minimalitySpecs(env *rbacEnv) {
	It("has a scenario for every generated rule, and no scenario for a rule that is gone", func() {
		var generated []string
		for _, side := range []struct {
			name string
			objs []*unstructured.Unstructured
		}{{"spoke", env.spokeObjs}, {"hub", env.hubObjs}} {
			for _, role := range ofKind(side.objs, "ClusterRole", "Role") {
				rules, _, err := unstructured.NestedSlice(role.Object, "rules")
				Expect(err).NotTo(HaveOccurred())
				for _, r := range rules {
					generated = append(generated, side.name+" "+ruleKey(role.GetKind(), r.(map[string]any)))
				}
			}
		}
		var covered []string
		for _, n := range ruleNeeds {
			// A verb's scenario comes on top of its rule's own.
			if n.verb == "" {
				covered = append(covered, n.side+" "+n.key())
			}
		}
		Expect(covered).To(ConsistOf(generated), "each generated rule needs exactly one scenario in ruleNeeds")
	})

	groups := map[string][]ruleNeed{}
	var order []string
	for _, n := range ruleNeeds {
		if _, ok := groups[n.group]; !ok {
			order = append(order, n.group)
		}
		groups[n.group] = append(groups[n.group], n)
	}
	for _, group := range order {
		needs := groups[group]
		var names []string
		for _, n := range needs {
			names = append(names, n.name()+" → "+n.scenario)
		}
		It(fmt.Sprintf("needs every rule of group %s: without %s", group, strings.Join(names, "; without ")), func(ctx context.Context) {
			side := needs[0].side
			objs := env.spokeObjs
			if side == "hub" {
				objs = env.hubObjs
			}
			roles := ofKind(objs, "ClusterRole", "Role")
			_, err := apply(ctx, withoutRules(roles, needs))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) {
				_, err := apply(ctx, roles)
				Expect(err).NotTo(HaveOccurred())
			})

			var p *harness.Process
			var poke func(ctx context.Context)
			if side == "spoke" {
				p, poke = spokeScenario(ctx, env, group)
			} else {
				p, poke = hubScenario(ctx, env, group)
			}
			for _, n := range needs {
				for _, forbidden := range append([]string{n.forbidden}, n.alsoForbidden...) {
					Eventually(func(ctx context.Context) string {
						poke(ctx)
						return logOf(p)
					}).WithContext(ctx).WithTimeout(45*time.Second).WithPolling(500*time.Millisecond).
						Should(MatchRegexp(forbidden), func() string {
							return fmt.Sprintf("%s: %s\nforbidden errors in the log of %s:\n%s", n.name(), n.scenario, p.Name(), forbiddenLines(logOf(p)))
						})
				}
			}
		}, NodeTimeout(2*time.Minute))
	}
}

// spokeScenario starts the agent as its ServiceAccount, and poke applies a
// Machine of its own (a new group on a node of its own, absent from the
// cluster: its pool entry reports Missing), so that every controller reads
// and writes what a new Machine needs: reservation StatefulSet and Service,
// node pool, status and events. The agent's validator may refuse the
// Machine until the agent serves; poke applies it again each time.
func spokeScenario(ctx context.Context, env *rbacEnv, name string) (*harness.Process, func(context.Context)) {
	GinkgoHelper()
	machineName := "minimal-" + strings.TrimPrefix(name, "spoke-")
	// Adoption from the original Imperator is asked for on the Machine.
	adopt := "false"
	if name == "spoke-migrate-adoption" {
		adopt = "true"
	}
	manifest := filepath.Join(GinkgoT().TempDir(), "machine.yaml")
	Expect(os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: imperator.tenzen-y.io/v1alpha1
kind: Machine
metadata:
  name: %[1]s
  labels:
    %[2]s: %[1]s
  annotations:
    %[3]s: "%[4]s"
spec:
  nodePool:
  - name: %[1]s-node
    machineType:
    - name: compute-small
  machineTypes:
  - name: compute-small
    spec:
      cpu: 1000m
      memory: 1Gi
      gpu:
        type: nvidia.com/gpu
        num: 1
    available: 1
`, machineName, imperatorv1alpha1.MachineGroupKey, adoptOriginalAnnotation, adopt)), 0o600)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		_, err := cluster.Kubectl(ctx, "delete", "machines.imperator.tenzen-y.io", machineName, "--ignore-not-found", "--wait=false")
		Expect(err).NotTo(HaveOccurred())
	})
	var args []string
	if name == "spoke-injection-policy" {
		args = env.spokeArgs("--injection=policy")
	} else {
		args = env.spokeArgs()
	}
	p := start("spoke-minimality-"+name, "spoke", args...)
	if name == "spoke-provisioningrequest-status" {
		// A request of the class whose PodTemplate does not exist: the
		// agent fails it, naming the pod set.
		request := provisioningRequestWithoutTemplate(machineName)
		return p, func(ctx context.Context) { _, _ = cluster.Kubectl(ctx, "apply", "-f", manifest, "-f", request) }
	}
	if name == "spoke-migrate-adoption" {
		// The original Imperator's MachineNodePool of the Machine's
		// group: the agent adopting the Machine removes it once its own
		// pool of the Machine exists.
		pool := originalNodePool(machineName)
		return p, func(ctx context.Context) { _, _ = cluster.Kubectl(ctx, "apply", "-f", manifest, "-f", pool) }
	}
	if name == "spoke-podgroup-status" {
		// A guest of the Machine's type in a gang of a native PodGroup:
		// no node of the pool exists, so the gang waits, and the agent
		// tells its PodGroup why.
		gang := gangOfPodGroup(machineName)
		return p, func(ctx context.Context) { _, _ = cluster.Kubectl(ctx, "apply", "-f", manifest, "-f", gang) }
	}
	return p, func(ctx context.Context) { _, _ = cluster.Kubectl(ctx, "apply", "-f", manifest) }
}

// adoptOriginalAnnotation, "true" on a Machine, asks the agent to adopt
// what the original Imperator left for the Machine's group
// (spoke/internal/migrate.AdoptAnnotation, internal to the agent).
const adoptOriginalAnnotation = imperatorv1alpha1.Prefix + "adopt-original"

// originalNodePool writes the manifest of a MachineNodePool of group as the
// original Imperator leaves it once the agent's CRD serves it: its
// finalizer imperator-machinenodepool-finalizer, the group label, no node
// (the agent's start-up retires the original's pools that way). The spec
// deletes it when it ends.
func originalNodePool(group string) string {
	GinkgoHelper()
	name := group + "-original"
	manifest := filepath.Join(GinkgoT().TempDir(), "original-pool.yaml")
	Expect(os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: imperator.tenzen-y.io/v1alpha1
kind: MachineNodePool
metadata:
  name: %[1]s
  labels:
    %[2]s: %[3]s
  finalizers:
  - imperator-machinenodepool-finalizer
spec:
  machineGroup: %[3]s
`, name, imperatorv1alpha1.MachineGroupKey, group)), 0o600)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		_, err := cluster.Kubectl(ctx, "delete", "machinenodepools.imperator.tenzen-y.io", name, "--ignore-not-found", "--wait=false")
		Expect(err).NotTo(HaveOccurred())
		// With the agent stopped, nobody removes the original's finalizer
		// if the agent had not yet.
		_, err = cluster.Kubectl(ctx, "patch", "machinenodepools.imperator.tenzen-y.io", name, "--type=merge",
			"-p", `{"metadata":{"finalizers":null}}`)
		if err != nil && !strings.Contains(err.Error(), "not found") {
			Expect(err).NotTo(HaveOccurred())
		}
	})
	return manifest
}

// gangOfPodGroup writes the manifest of an injection-enabled namespace
// named after group, a native PodGroup of minCount 1 in it, and a guest of
// group's compute-small naming it in spec.schedulingGroup; the spec deletes
// the namespace when it ends.
func gangOfPodGroup(group string) string {
	GinkgoHelper()
	manifest := filepath.Join(GinkgoT().TempDir(), "gang.yaml")
	Expect(os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels:
    %[2]s: %[3]s
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata:
  name: train
  namespace: %[1]s
spec:
  schedulingPolicy:
    gang:
      minCount: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: worker
  namespace: %[1]s
  labels:
    %[4]s: %[1]s
    %[5]s: compute-small
    %[6]s: guest
spec:
  schedulingGroup:
    podGroupName: train
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
`, group, imperatorv1alpha1.InjectResourceKey, imperatorv1alpha1.InjectResourceEnabled,
		imperatorv1alpha1.MachineGroupKey, imperatorv1alpha1.MachineTypeKey, imperatorv1alpha1.PodRoleKey)), 0o600)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		_, err := cluster.Kubectl(ctx, "delete", "namespace", group, "--ignore-not-found", "--wait=false")
		Expect(err).NotTo(HaveOccurred())
	})
	return manifest
}

// provisioningRequestWithoutTemplate writes the manifest of a namespace
// named after group and a ProvisioningRequest of the class
// capacity-hold.imperator.tenzen-y.io in it naming a PodTemplate that does
// not exist; the spec deletes the namespace when it ends.
func provisioningRequestWithoutTemplate(group string) string {
	GinkgoHelper()
	manifest := filepath.Join(GinkgoT().TempDir(), "provisioningrequest.yaml")
	Expect(os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata:
  name: train
  namespace: %[1]s
spec:
  provisioningClassName: %[2]s
  podSets:
  - podTemplateRef:
      name: missing
    count: 1
`, group, imperatorv1alpha1.CapacityHoldProvisioningClass)), 0o600)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		_, err := cluster.Kubectl(ctx, "delete", "namespace", group, "--ignore-not-found", "--wait=false")
		Expect(err).NotTo(HaveOccurred())
	})
	return manifest
}

// hubScenario starts the hub as its ServiceAccount and, once it serves, a
// spoke agent (as the admin: the hub's rights are under test) that joins it
// as a new cluster and reports, so that the hub registers, persists and
// scores a cluster it has not seen.
func hubScenario(ctx context.Context, env *rbacEnv, name string) (*harness.Process, func(context.Context)) {
	GinkgoHelper()
	hub := start("hub-minimality-"+name, "hub", env.hubArgs()...)
	joined, heldPastValidUntil := false, false
	clusterName := "minimal-" + strings.TrimPrefix(name, "hub-")
	return hub, func(ctx context.Context) {
		if name == "hub-fleethold-status" && !heldPastValidUntil {
			heldPastValidUntil = expiredFleetHold(ctx)
		}
		if joined || !hub.Running() || slices.Contains([]string{"hub-ca", "hub-revocations", "hub-inventories", "hub-registry", "hub-fleetholds", "hub-fleethold-status"}, name) {
			return
		}
		// A token issued with the admin's rights.
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "hub"), "token", "create", "--cluster", clusterName, "--ttl", "10m", "--kubeconfig="+cluster.KubeconfigPath)
		out, err := cmd.Output()
		if err != nil {
			return
		}
		dir := GinkgoT().TempDir()
		tokenFile := filepath.Join(dir, "token")
		Expect(os.WriteFile(tokenFile, out, 0o600)).To(Succeed())
		ports, err := harness.FreePorts(2)
		Expect(err).NotTo(HaveOccurred())
		start("spoke-for-"+name, "spoke",
			"--kubeconfig="+cluster.KubeconfigPath,
			"--namespace="+namespace,
			"--leader-elect=false",
			"--webhook-bind-address=127.0.0.1",
			fmt.Sprintf("--webhook-port=%d", ports[0]),
			"--webhook-hosts=127.0.0.1",
			"--webhook-cert-secret="+clusterName+"-webhook",
			// Not spoke-a's configurations: this agent serves none.
			"--mutating-webhook-configuration="+clusterName+"-absent",
			"--validating-webhook-configuration="+clusterName+"-absent",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
			"--metrics-bind-address=0",
			"--hub-address="+env.hubAddress(),
			"--cluster-name="+clusterName,
			"--hub-ca-file="+env.hubCAFile,
			"--join-token-file="+tokenFile,
			"--hub-credentials-secret="+clusterName+"-credentials",
		)
		joined = true
	}
}

// forbiddenLines are the lines of log that report a forbidden request.
func forbiddenLines(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "forbidden") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// expiredFleetHold has the admin create a FleetHold recorded Held whose
// validUntil has passed, for the hub's expiry controller to record Expired;
// true once it is there. The spec deletes it when it ends.
func expiredFleetHold(ctx context.Context) bool {
	manifest := filepath.Join(GinkgoT().TempDir(), "fleethold.yaml")
	Expect(os.WriteFile(manifest, []byte(`apiVersion: imperator.tenzen-y.io/v1alpha1
kind: FleetHold
metadata:
  name: minimal-expired
  namespace: imperator-system
spec:
  machineType:
    type: compute-small
  count: 1
  validUntil: "2026-01-01T00:00:00Z"
`), 0o600)).To(Succeed())
	if _, err := cluster.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		return false
	}
	DeferCleanup(func(ctx context.Context) {
		_, err := cluster.Kubectl(ctx, "delete", "fleetholds.imperator.tenzen-y.io", "minimal-expired", "-n", "imperator-system", "--ignore-not-found")
		Expect(err).NotTo(HaveOccurred())
	})
	_, err := cluster.Kubectl(ctx, "patch", "fleetholds.imperator.tenzen-y.io", "minimal-expired", "-n", "imperator-system",
		"--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Held"}}`)
	return err == nil
}

package podinjector

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// quantities compare by value: "40" and "40000m" are the same CPU.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

const (
	group      = "general-machine"
	xlargeKey  = imperatorv1alpha1.Prefix + "compute-xlarge"
	mediumKey  = imperatorv1alpha1.Prefix + "compute-medium"
	largeKey   = imperatorv1alpha1.Prefix + "compute-large"
	nodePool   = imperatorv1alpha1.NodePoolKey
	containerL = imperatorv1alpha1.InjectingContainerKey
)

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func toleration(key, value string) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule}
}

// What the original Imperator injects (docs/contract.md) for compute-xlarge
// of general-machine (with the GPU selector its Machine declares: product
// NVIDIA-GeForce-RTX-3090).
var (
	xlargeReqs = []corev1.NodeSelectorRequirement{
		in(xlargeKey, group), in(nodePool, "ready"), in(imperatorv1alpha1.GPUProductLabel, "NVIDIA-GeForce-RTX-3090"),
	}
	xlargeTolerations = []corev1.Toleration{toleration(xlargeKey, group), toleration(nodePool, "ready")}
	xlargeResources   = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("40000m"), corev1.ResourceMemory: resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("2"),
	}
)

func reqs(extra ...corev1.NodeSelectorRequirement) []corev1.NodeSelectorRequirement {
	return append(extra, xlargeReqs...)
}

func setRequired(p *corev1.Pod, terms ...corev1.NodeSelectorTerm) {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
}

// setResources makes requests = limits = rl on top of what the container sets.
func setResources(c *corev1.Container, rl corev1.ResourceList) {
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	for name, q := range rl {
		c.Resources.Requests[name] = q
		c.Resources.Limits[name] = q
	}
}

func annotate(p *corev1.Pod, record string) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[imperatorv1alpha1.InjectedAnnotation] = record
}

const xlargeRecordMain = `{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main"}`

// injectedXlarge is the expected result of injecting compute-xlarge into the
// container at index i of a pod without affinity or tolerations.
func injectedXlarge(i int, record string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, xlargeTolerations...)
		setRequired(p, term(xlargeReqs...))
		setResources(&p.Spec.Containers[i], xlargeResources)
		annotate(p, record)
	}
}

func guest() *wrappers.PodWrapper {
	return wrappers.MakePod("team-a", "guest").Guest(group, "compute-xlarge")
}

func withInitContainer(p *corev1.Pod) *corev1.Pod {
	p.Spec.InitContainers = []corev1.Container{
		{Name: "fetch", Image: "busybox"},
		{Name: "log-shipper", Image: "fluent-bit", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways)},
	}
	return p
}

func ptrTo[T any](v T) *T { return &v }

func TestInject(t *testing.T) {
	general := wrappers.GeneralMachine().Obj()
	cpuOnly := wrappers.MakeMachine("batch", "batch").Type("small", "2", "4Gi", 3).Obj()
	allSelectors := wrappers.MakeMachine("dgx", "dgx").
		Type("a100", "64", "512Gi", 1).GPU("nvidia.com/gpu", 8, "NVIDIA-A100-SXM4-80GB", "ampere").GPUMachine("DGX-A100").Obj()

	seedInjected, _, err := Inject(guest().Label(containerL, "main").Obj(), general)
	if err != nil {
		t.Fatalf("injecting the seed pod: %v", err)
	}

	cases := map[string]struct {
		pod     *corev1.Pod
		machine *imperatorv1alpha1.Machine
		// want edits a copy of pod into the expected result; nil: unchanged.
		want func(*corev1.Pod)
		// wantDenied are substrings of the denial message; empty: admitted.
		wantDenied []string
	}{
		// Every combination of the three labels.
		"no labels: not a guest, untouched": {
			pod:     wrappers.MakePod("team-a", "web").Obj(),
			machine: general,
		},
		"group only: not a guest, untouched": {
			pod:     wrappers.MakePod("team-a", "web").Label(imperatorv1alpha1.MachineGroupKey, group).Obj(),
			machine: general,
		},
		"type only: not a guest, untouched": {
			pod:     wrappers.MakePod("team-a", "web").Label(imperatorv1alpha1.MachineTypeKey, "compute-xlarge").Obj(),
			machine: general,
		},
		"group and type without pod-role: untouched": {
			pod:     guest().Label(imperatorv1alpha1.PodRoleKey, "").Obj(),
			machine: general,
		},
		"reservation pod with group and type: untouched": {
			pod:     guest().Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation)).Obj(),
			machine: general,
		},
		"pod-role guest only: denied, both labels named": {
			pod:        wrappers.MakePod("team-a", "guest").Label(imperatorv1alpha1.PodRoleKey, "guest").Obj(),
			wantDenied: []string{"incomplete guest pod labels", imperatorv1alpha1.MachineGroupKey + " and " + imperatorv1alpha1.MachineTypeKey},
		},
		"guest without machine-type: denied": {
			pod:        guest().Label(imperatorv1alpha1.MachineTypeKey, "").Obj(),
			machine:    general,
			wantDenied: []string{"incomplete guest pod labels", "must also set " + imperatorv1alpha1.MachineTypeKey},
		},
		"guest without machine-group: denied": {
			pod:        guest().Label(imperatorv1alpha1.MachineGroupKey, "").Obj(),
			wantDenied: []string{"incomplete guest pod labels", "must also set " + imperatorv1alpha1.MachineGroupKey},
		},
		"all three labels: injected into the first container": {
			pod:     guest().Obj(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},

		// Unknown names.
		"unknown machine group: denied": {
			pod:        guest().Label(imperatorv1alpha1.MachineGroupKey, "no-such-group").Obj(),
			wantDenied: []string{`unknown machine group "no-such-group"`, imperatorv1alpha1.MachineGroupKey + "=no-such-group"},
		},
		"unknown machine type in the group: denied, offered types listed": {
			pod:        guest().Label(imperatorv1alpha1.MachineTypeKey, "compute-huge").Obj(),
			machine:    general,
			wantDenied: []string{`unknown machine type "compute-huge"`, `"compute-medium", "compute-xlarge", "compute-large"`},
		},
		"unknown injecting container: denied, containers listed": {
			pod:        guest().Container("sidecar", "envoy").Label(containerL, "trainer").Obj(),
			machine:    general,
			wantDenied: []string{`unknown injecting container "trainer"`, containerL, `["main", "sidecar"]`},
		},
		"injecting container names an init container: denied": {
			pod:        withInitContainer(guest().Label(containerL, "fetch").Obj()),
			machine:    general,
			wantDenied: []string{`unknown injecting container "fetch"`},
		},
		"no containers: denied": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				p.Spec.Containers = nil
				return p
			}(),
			machine:    general,
			wantDenied: []string{"no containers"},
		},

		// Containers.
		"named container: the second one gets the resources, the first is untouched": {
			pod:     guest().Container("trainer", "cuda").Label(containerL, "trainer").Obj(),
			machine: general,
			want: injectedXlarge(1,
				`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"trainer"}`),
		},
		"empty injecting-container label: the first container": {
			pod:     guest().Label(containerL, "").Container("sidecar", "envoy").Obj(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},
		"init containers and native sidecars untouched": {
			pod:     withInitContainer(guest().Obj()),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},
		"ephemeral-storage and other resources survive": {
			pod:     guest().Request(0, corev1.ResourceEphemeralStorage, "10Gi").Request(0, "example.com/fpga", "1").Obj(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},
		"conflicting cpu and memory are replaced and recorded with their old values": {
			pod: func() *corev1.Pod {
				p := guest().Request(0, corev1.ResourceCPU, "2").Obj()
				p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
				return p
			}(),
			machine: general,
			want: injectedXlarge(0, `{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main",`+
				`"replaced":[{"resource":"cpu","request":"2","limit":"2"},{"resource":"memory","limit":"1Gi"}]}`),
		},
		"equal quantity in another spelling is neither replaced nor recorded": {
			pod:     guest().Request(0, corev1.ResourceCPU, "40").Request(0, "nvidia.com/gpu", "2").Obj(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},

		// Tolerations.
		"tolerations already present are not duplicated": {
			pod: func() *corev1.Pod {
				p := guest().Toleration(xlargeKey, group).Toleration("dedicated", "gpu").Obj()
				// An empty operator means Equal.
				p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: nodePool, Value: "ready", Effect: corev1.TaintEffectNoSchedule})
				return p
			}(),
			machine: general,
			want: func(p *corev1.Pod) {
				setRequired(p, term(xlargeReqs...))
				setResources(&p.Spec.Containers[0], xlargeResources)
				annotate(p, xlargeRecordMain)
			},
		},

		// Node affinity.
		"pod affinity without node affinity: kept, node affinity added": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname}},
				}}
				return p
			}(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},
		"several required terms: ours ANDed into each, no new OR-ed term": {
			pod: guest().RequiredNodeAffinity(
				term(in("topology.kubernetes.io/zone", "a")),
				term(in("topology.kubernetes.io/zone", "b"), expr("spot", corev1.NodeSelectorOpDoesNotExist)),
			).Obj(),
			machine: general,
			want: func(p *corev1.Pod) {
				injectedXlarge(0, xlargeRecordMain)(p)
				setRequired(p,
					term(reqs(in("topology.kubernetes.io/zone", "a"))...),
					term(reqs(in("topology.kubernetes.io/zone", "b"), expr("spot", corev1.NodeSelectorOpDoesNotExist))...),
				)
			},
		},
		"matchFields-only term gets our expressions": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				setRequired(p, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{in("metadata.name", "michiru")}})
				return p
			}(),
			machine: general,
			want: func(p *corev1.Pod) {
				injectedXlarge(0, xlargeRecordMain)(p)
				setRequired(p, corev1.NodeSelectorTerm{
					MatchExpressions: xlargeReqs,
					MatchFields:      []corev1.NodeSelectorRequirement{in("metadata.name", "michiru")},
				})
			},
		},
		"preferred terms untouched": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 10, Preference: term(expr(xlargeKey, corev1.NodeSelectorOpDoesNotExist))},
					},
				}}
				return p
			}(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},
		"Exists on our key is compatible: kept, ours added": {
			pod:     guest().RequiredNodeAffinity(term(expr(xlargeKey, corev1.NodeSelectorOpExists))).Obj(),
			machine: general,
			want: func(p *corev1.Pod) {
				injectedXlarge(0, xlargeRecordMain)(p)
				setRequired(p, term(reqs(expr(xlargeKey, corev1.NodeSelectorOpExists))...))
			},
		},
		"In with our value among others is compatible: kept, ours added": {
			pod:     guest().RequiredNodeAffinity(term(in(nodePool, "ready", "maintenance"))).Obj(),
			machine: general,
			want: func(p *corev1.Pod) {
				injectedXlarge(0, xlargeRecordMain)(p)
				setRequired(p, term(reqs(in(nodePool, "ready", "maintenance"))...))
			},
		},
		"our expressions already present: not duplicated, order kept": {
			pod:     guest().RequiredNodeAffinity(term(in(nodePool, "ready"), in("zone", "a"), in(xlargeKey, group))).Obj(),
			machine: general,
			want: func(p *corev1.Pod) {
				injectedXlarge(0, xlargeRecordMain)(p)
				setRequired(p, term(in(nodePool, "ready"), in("zone", "a"), in(xlargeKey, group),
					in(imperatorv1alpha1.GPUProductLabel, "NVIDIA-GeForce-RTX-3090")))
			},
		},
		"DoesNotExist on the type key: denied naming the key": {
			pod:        guest().RequiredNodeAffinity(term(expr(xlargeKey, corev1.NodeSelectorOpDoesNotExist))).Obj(),
			machine:    general,
			wantDenied: []string{"nodeSelectorTerms[0]", "expression on " + xlargeKey + " (DoesNotExist)", "requires " + xlargeKey + "=general-machine"},
		},
		"NotIn our value on the node-pool key: denied naming the key": {
			pod:        guest().RequiredNodeAffinity(term(expr(nodePool, corev1.NodeSelectorOpNotIn, "ready"))).Obj(),
			machine:    general,
			wantDenied: []string{"expression on " + nodePool + " (NotIn [ready])"},
		},
		"In without our value on a GPU selector: denied naming the key": {
			pod:        guest().RequiredNodeAffinity(term(in(imperatorv1alpha1.GPUProductLabel, "Tesla-V100"))).Obj(),
			machine:    general,
			wantDenied: []string{"expression on " + imperatorv1alpha1.GPUProductLabel + " (In [Tesla-V100])"},
		},
		"Gt on our key with a non-numeric value: denied": {
			pod:        guest().RequiredNodeAffinity(term(expr(nodePool, corev1.NodeSelectorOpGt, "1"))).Obj(),
			machine:    general,
			wantDenied: []string{"expression on " + nodePool + " (Gt [1])"},
		},
		"contradiction in the second term only: denied naming that term": {
			pod: guest().RequiredNodeAffinity(
				term(in("zone", "a")),
				term(expr(xlargeKey, corev1.NodeSelectorOpNotIn, group)),
			).Obj(),
			machine:    general,
			wantDenied: []string{"nodeSelectorTerms[1]", xlargeKey},
		},
		"nodeSelector pinning our key to another value: denied": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				p.Spec.NodeSelector = map[string]string{nodePool: "maintenance"}
				return p
			}(),
			machine:    general,
			wantDenied: []string{"spec.nodeSelector[" + nodePool + `]="maintenance"`},
		},
		"guest naming its node (spec.nodeName): denied naming the field and the gate": {
			pod:     guest().NodeName("michiru").Obj(),
			machine: general,
			wantDenied: []string{`spec.nodeName "michiru": a guest does not name its node`,
				"at the scheduling gate " + imperatorv1alpha1.SlotSchedulingGate},
		},
		"nodeSelector agreeing with our keys: kept": {
			pod: func() *corev1.Pod {
				p := guest().Obj()
				p.Spec.NodeSelector = map[string]string{nodePool: "ready", "zone": "a"}
				return p
			}(),
			machine: general,
			want:    injectedXlarge(0, xlargeRecordMain),
		},

		// Machine types.
		"GPU family, product and machine selectors all ANDed": {
			pod:     wrappers.MakePod("team-a", "guest").Guest("dgx", "a100").Obj(),
			machine: allSelectors,
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{toleration(imperatorv1alpha1.Prefix+"a100", "dgx"), toleration(nodePool, "ready")}
				setRequired(p, term(
					in(imperatorv1alpha1.Prefix+"a100", "dgx"), in(nodePool, "ready"),
					in(imperatorv1alpha1.GPUFamilyLabel, "ampere"),
					in(imperatorv1alpha1.GPUProductLabel, "NVIDIA-A100-SXM4-80GB"),
					in(imperatorv1alpha1.GPUMachineLabel, "DGX-A100"),
				))
				setResources(&p.Spec.Containers[0], corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), "nvidia.com/gpu": resource.MustParse("8"),
				})
				annotate(p, `{"machine":"dgx","machineGroup":"dgx","machineType":"a100","container":"main"}`)
			},
		},
		"CPU-only machine type: no GPU resource nor GPU selector": {
			pod:     wrappers.MakePod("batch", "job").Guest("batch", "small").Obj(),
			machine: cpuOnly,
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{toleration(imperatorv1alpha1.Prefix+"small", "batch"), toleration(nodePool, "ready")}
				setRequired(p, term(in(imperatorv1alpha1.Prefix+"small", "batch"), in(nodePool, "ready")))
				setResources(&p.Spec.Containers[0], corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
				})
				annotate(p, `{"machine":"batch","machineGroup":"batch","machineType":"small","container":"main"}`)
			},
		},
		"compute-medium selects the DGX-1 machine": {
			pod:     wrappers.MakePod("team-a", "guest").Guest(group, "compute-medium").Obj(),
			machine: general,
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{toleration(mediumKey, group), toleration(nodePool, "ready")}
				setRequired(p, term(in(mediumKey, group), in(nodePool, "ready"), in(imperatorv1alpha1.GPUMachineLabel, "DGX-1")))
				setResources(&p.Spec.Containers[0], corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("6"), corev1.ResourceMemory: resource.MustParse("48Gi"), "nvidia.com/gpu": resource.MustParse("1"),
				})
				annotate(p, `{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-medium","container":"main"}`)
			},
		},

		// Idempotence.
		"already injected pod: nothing changes": {
			pod:     seedInjected,
			machine: general,
		},
		"pod re-labelled to another type after a forged annotation: injected afresh": {
			pod: func() *corev1.Pod {
				p := guest().Label(imperatorv1alpha1.MachineTypeKey, "compute-large").Obj()
				annotate(p, xlargeRecordMain)
				return p
			}(),
			machine: general,
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{toleration(largeKey, group), toleration(nodePool, "ready")}
				setRequired(p, term(in(largeKey, group), in(nodePool, "ready"), in(imperatorv1alpha1.GPUFamilyLabel, "ampere")))
				setResources(&p.Spec.Containers[0], corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("20"), corev1.ResourceMemory: resource.MustParse("64Gi"), "nvidia.com/gpu": resource.MustParse("1"),
				})
				annotate(p, `{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-large","container":"main"}`)
			},
		},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			got, record, err := Inject(tc.pod, tc.machine)
			if diff := cmp.Diff(before, tc.pod, quantities); diff != "" {
				t.Errorf("Inject modified its input (-before +after):\n%s", diff)
			}

			if len(tc.wantDenied) > 0 {
				var deniedErr *DeniedError
				if !errors.As(err, &deniedErr) {
					t.Fatalf("Inject() error = %v, want a denial containing %q", err, tc.wantDenied)
				}
				for _, s := range tc.wantDenied {
					if !strings.Contains(deniedErr.Reason, s) {
						t.Errorf("denial %q does not contain %q", deniedErr.Reason, s)
					}
				}
				if got != nil || record != nil {
					t.Errorf("denied Inject() returned pod %v and record %v, want nil", got != nil, record)
				}
				return
			}
			if err != nil {
				t.Fatalf("Inject() error = %v", err)
			}

			want := tc.pod.DeepCopy()
			if tc.want != nil {
				tc.want(want)
			}
			if record != nil {
				// Every admitted guest waits at the slot gate for the agent.
				injectSlotGate(want)
			}
			if diff := cmp.Diff(want, got, quantities); diff != "" {
				t.Errorf("Inject() pod mismatch (-want +got):\n%s", diff)
			}

			annotation, annotated := got.Annotations[imperatorv1alpha1.InjectedAnnotation]
			if (record != nil) != annotated {
				t.Fatalf("record = %v, annotated = %v: a guest pod gets both, any other pod neither", record, annotated)
			}
			if record != nil {
				encoded, err := json.Marshal(record)
				if err != nil {
					t.Fatalf("encoding record: %v", err)
				}
				if diff := cmp.Diff(annotation, string(encoded)); diff != "" {
					t.Errorf("annotation differs from the returned record (-annotation +record):\n%s", diff)
				}
			}

			again, _, err := Inject(got, tc.machine)
			if err != nil {
				t.Fatalf("re-injecting: %v", err)
			}
			if diff := cmp.Diff(got, again, quantities); diff != "" {
				t.Errorf("re-injecting changed the pod (-once +twice):\n%s", diff)
			}
		})
	}
}

func TestInjectHoldsGuestsAtTheSlotGate(t *testing.T) {
	general := wrappers.GeneralMachine().Obj()
	slot := corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate}
	other := corev1.PodSchedulingGate{Name: "example.com/quota"}
	cases := map[string]struct {
		gates     []corev1.PodSchedulingGate
		wantGates []corev1.PodSchedulingGate
	}{
		"a guest without gates gets the slot gate":             {wantGates: []corev1.PodSchedulingGate{slot}},
		"a guest with another gate keeps it and gets the slot": {gates: []corev1.PodSchedulingGate{other}, wantGates: []corev1.PodSchedulingGate{other, slot}},
		"a guest already at the slot gate keeps one":           {gates: []corev1.PodSchedulingGate{slot, other}, wantGates: []corev1.PodSchedulingGate{slot, other}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := guest().Obj()
			pod.Spec.SchedulingGates = tc.gates
			got, _, err := Inject(pod, general)
			if err != nil {
				t.Fatalf("Inject() error = %v", err)
			}
			if diff := cmp.Diff(tc.wantGates, got.Spec.SchedulingGates); diff != "" {
				t.Errorf("scheduling gates (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a pod that is not a guest is not gated", func(t *testing.T) {
		got, _, err := Inject(wrappers.MakePod("team-a", "plain").Obj(), general)
		if err != nil {
			t.Fatalf("Inject() error = %v", err)
		}
		if len(got.Spec.SchedulingGates) != 0 {
			t.Errorf("scheduling gates = %v, want none", got.Spec.SchedulingGates)
		}
	})
}

func TestInjectNilPod(t *testing.T) {
	var deniedErr *DeniedError
	if _, _, err := Inject(nil, wrappers.GeneralMachine().Obj()); !errors.As(err, &deniedErr) {
		t.Errorf("Inject(nil) error = %v, want a denial", err)
	}
}

// An injected pod shares with its input what Inject does not change
// (injectionCopy). If it shared the arrays of the lists Inject appends to, a
// later append to the input (or a second injection of it) would write into
// the injected pod: the user's pod and the patch would disagree.
func TestInjectedPodDoesNotShareTheListsItAppendsTo(t *testing.T) {
	pod := guest().Label(containerL, "main").Obj()
	setRequired(pod, term(in("topology.kubernetes.io/zone", "a")))
	pod.Spec.Tolerations = slices.Grow([]corev1.Toleration{toleration("team", "a")}, 8)
	pod.Spec.SchedulingGates = slices.Grow([]corev1.PodSchedulingGate{{Name: "example.com/other"}}, 8)
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	terms[0].MatchExpressions = slices.Grow(terms[0].MatchExpressions, 8)
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}

	injected, _, err := Inject(pod, wrappers.GeneralMachine().Obj())
	if err != nil {
		t.Fatalf("Inject() error = %v", err)
	}
	want := injected.DeepCopy()

	// The user's side appends to every list and writes every map afterwards.
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, toleration("late", "x"), toleration("late", "y"), toleration("late", "z"))
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "late"})
	terms[0].MatchExpressions = append(terms[0].MatchExpressions, in("late", "x"), in("late", "y"), in("late", "z"), in("late", "w"))
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	pod.Annotations = map[string]string{"late": "x"}

	if diff := cmp.Diff(want, injected, quantities); diff != "" {
		t.Fatalf("changing the input after Inject changed the injected pod (-want +got):\n%s", diff)
	}
}

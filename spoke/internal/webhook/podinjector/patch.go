package podinjector

import (
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// admittedPod is the part of an admitted pod the injector reads and may
// change; every other field of the request is skipped while decoding and
// never re-encoded, so it reaches the API server exactly as the user wrote
// it (fields this binary's API types do not know included).
//
// The pointers and slices keep what the patch needs to know: whether an
// object or list exists in the request, so that the patch adds to it or
// creates it.
type admittedPod struct {
	Metadata struct {
		Labels      guestLabels       `json:"labels"`
		Annotations *guestAnnotations `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName        string                     `json:"nodeName"`
		NodeSelector    map[string]string          `json:"nodeSelector"`
		Affinity        *corev1.Affinity           `json:"affinity"`
		Tolerations     []corev1.Toleration        `json:"tolerations"`
		SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates"`
		Containers      []admittedContainer        `json:"containers"`
		// The rest is read to check that the guest takes one unit only
		// (checkOneUnit) and never patched.
		InitContainers   []admittedContainer          `json:"initContainers"`
		Resources        *corev1.ResourceRequirements `json:"resources"`
		Overhead         corev1.ResourceList          `json:"overhead"`
		RuntimeClassName *string                      `json:"runtimeClassName"`
		ResourceClaims   []corev1.PodResourceClaim    `json:"resourceClaims"`
	} `json:"spec"`
}

// admittedContainer is a container's name, resources and restart policy
// (set on sidecars, init containers that run beside the others); Resources
// is nil when the request has none.
type admittedContainer struct {
	Name          string                         `json:"name"`
	Resources     *corev1.ResourceRequirements   `json:"resources"`
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy"`
}

// guestLabels are the labels the injector reads (docs/contract.md); the
// others are skipped while decoding. The tags are the keys of
// imperatorv1alpha1 (a test checks them), matched exactly: label keys are
// case-sensitive, and so is the decoder.
type guestLabels struct {
	Role               string `json:"imperator.tenzen-y.io/pod-role"`
	MachineGroup       string `json:"imperator.tenzen-y.io/machine-group"`
	MachineType        string `json:"imperator.tenzen-y.io/machine-type"`
	InjectingContainer string `json:"imperator.tenzen-y.io/injecting-container"`
	Hold               string `json:"imperator.tenzen-y.io/hold"`
}

// guestAnnotations are the annotations the injector reads and sets; a nil
// field is an annotation the request lacks. A nil *guestAnnotations is a
// request without annotations (absent or null), which the patch creates.
type guestAnnotations struct {
	Injected   *string `json:"imperator.tenzen-y.io/injected"`
	AdmittedAt *string `json:"imperator.tenzen-y.io/admitted-at"`
	HoldUID    *string `json:"imperator.tenzen-y.io/hold-uid"`
	// A ProvisioningRequest consumer names the hold it claims with these.
	ConsumeProvisioningRequest *string `json:"autoscaling.x-k8s.io/consume-provisioning-request"`
	ProvisioningClassName      *string `json:"autoscaling.x-k8s.io/provisioning-class-name"`
}

// value returns the request's value of the annotation key, one of
// setAnnotations.
func (a *guestAnnotations) value(key string) (string, bool) {
	var v *string
	if a != nil {
		switch key {
		case imperatorv1alpha1.InjectedAnnotation:
			v = a.Injected
		case imperatorv1alpha1.AdmittedAtAnnotation:
			v = a.AdmittedAt
		case imperatorv1alpha1.HoldUIDAnnotation:
			v = a.HoldUID
		case imperatorv1alpha1.ConsumeProvisioningRequestAnnotation:
			v = a.ConsumeProvisioningRequest
		case imperatorv1alpha1.ProvisioningClassNameAnnotation:
			v = a.ProvisioningClassName
		}
	}
	if v == nil {
		return "", false
	}
	return *v, true
}

// decodeAdmittedPod decodes the fields of admittedPod, with the API
// machinery's case-sensitive decoder: "Metadata" is not "metadata", and a
// label key spelled in other case is another label.
func decodeAdmittedPod(raw []byte) (*admittedPod, error) {
	admitted := &admittedPod{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, admitted); err != nil {
		return nil, err
	}
	return admitted, nil
}

// pod is the admitted pod as Inject reads it: the decoded fields only.
// Inject copies what it changes, so the admitted pod keeps the request's
// values for injectionPatch to compare with.
func (a *admittedPod) pod() *corev1.Pod {
	pod := &corev1.Pod{}
	labels := a.Metadata.Labels
	pod.Labels = make(map[string]string, 4)
	setLabel := func(key, value string) {
		if value != "" {
			pod.Labels[key] = value
		}
	}
	setLabel(imperatorv1alpha1.PodRoleKey, labels.Role)
	setLabel(imperatorv1alpha1.MachineGroupKey, labels.MachineGroup)
	setLabel(imperatorv1alpha1.MachineTypeKey, labels.MachineType)
	setLabel(imperatorv1alpha1.InjectingContainerKey, labels.InjectingContainer)
	setLabel(imperatorv1alpha1.HoldKey, labels.Hold)
	for _, key := range []string{imperatorv1alpha1.InjectedAnnotation, imperatorv1alpha1.HoldUIDAnnotation,
		imperatorv1alpha1.ConsumeProvisioningRequestAnnotation, imperatorv1alpha1.ProvisioningClassNameAnnotation} {
		if value, ok := a.Metadata.Annotations.value(key); ok {
			if pod.Annotations == nil {
				pod.Annotations = make(map[string]string, 4)
			}
			pod.Annotations[key] = value
		}
	}
	pod.Spec.NodeName = a.Spec.NodeName
	pod.Spec.NodeSelector = a.Spec.NodeSelector
	pod.Spec.Affinity = a.Spec.Affinity
	pod.Spec.Tolerations = a.Spec.Tolerations
	pod.Spec.SchedulingGates = a.Spec.SchedulingGates
	pod.Spec.Containers = containers(a.Spec.Containers)
	pod.Spec.InitContainers = containers(a.Spec.InitContainers)
	pod.Spec.Resources = a.Spec.Resources
	pod.Spec.Overhead = a.Spec.Overhead
	pod.Spec.RuntimeClassName = a.Spec.RuntimeClassName
	pod.Spec.ResourceClaims = a.Spec.ResourceClaims
	return pod
}

// containers are the decoded containers as corev1.Containers, nil when
// there are none.
func containers(admitted []admittedContainer) []corev1.Container {
	if len(admitted) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(admitted))
	for i, c := range admitted {
		out[i].Name = c.Name
		out[i].RestartPolicy = c.RestartPolicy
		if c.Resources != nil {
			out[i].Resources = *c.Resources
		}
	}
	return out
}

// injectionPatch is the JSON patch turning the admitted pod into injected,
// built from what Inject and the handler change: it adds the annotations
// (and removes a hold UID the user wrote that the guest does not claim), the node
// selector requirements appended to each required term, the tolerations and
// the scheduling gate appended, and the target container's requests and
// limits that differ. Besides that one removal it only adds (an "add" of an
// existing object member replaces it), so nothing else the user wrote is
// removed.
func injectionPatch(admitted *admittedPod, injected *corev1.Pod, containerName string, contract *typeContract) []jsonpatch.JsonPatchOperation {
	ops := make([]jsonpatch.JsonPatchOperation, 0, 16)
	add := func(path string, value any) {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: value})
	}

	if admitted.Metadata.Annotations == nil {
		add("/metadata/annotations", injected.Annotations)
	} else {
		// Inject and the handler set these and no other annotation; the
		// hold's UID only when the guest claims one.
		for _, a := range setAnnotations {
			value, set := injected.Annotations[a.key]
			switch old, ok := admitted.Metadata.Annotations.value(a.key); {
			case set && (!ok || old != value):
				add(a.path, value)
			case !set && ok:
				ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "remove", Path: a.path})
			}
		}
	}

	affinityPatch(admitted.Spec.Affinity, injected.Spec.Affinity, add)
	appendPatch("/spec/tolerations", admitted.Spec.Tolerations, injected.Spec.Tolerations, add)
	appendPatch("/spec/schedulingGates", admitted.Spec.SchedulingGates, injected.Spec.SchedulingGates, add)

	for i, c := range admitted.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		resources := injected.Spec.Containers[i].Resources
		path := firstContainerResources
		if i > 0 {
			path = "/spec/containers/" + strconv.Itoa(i) + "/resources"
		}
		if c.Resources == nil {
			add(path, corev1.ResourceRequirements{Requests: resources.Requests, Limits: resources.Limits})
		} else {
			resourceListPatch(path+"/requests", c.Resources.Requests, resources.Requests, contract, add)
			resourceListPatch(path+"/limits", c.Resources.Limits, resources.Limits, contract, add)
		}
		break
	}
	return ops
}

// firstContainerResources is the JSON pointer of the first container's
// resources.
const firstContainerResources = "/spec/containers/0/resources"

// affinityPatch adds the required node selector terms' new expressions,
// creating the first object on the path to them that the request lacks.
func affinityPatch(admitted, injected *corev1.Affinity, add func(string, any)) {
	const path = "/spec/affinity"
	switch {
	case injected == nil || injected.NodeAffinity == nil || injected.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		return
	case admitted == nil:
		add(path, injected)
		return
	case admitted.NodeAffinity == nil:
		add(path+"/nodeAffinity", injected.NodeAffinity)
		return
	case admitted.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		add(path+"/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution", injected.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		return
	}
	const termsPath = path + "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
	admittedTerms := admitted.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	injectedTerms := injected.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(admittedTerms) != len(injectedTerms) {
		// No term in the request: Inject made the one term.
		add(termsPath, injectedTerms)
		return
	}
	for i := range injectedTerms {
		appendPatch(termsPath+"/"+strconv.Itoa(i)+"/matchExpressions",
			admittedTerms[i].MatchExpressions, injectedTerms[i].MatchExpressions, add)
	}
}

// appendPatch adds the items injected appended to the admitted list, or the
// whole list when the request's is empty, null or absent.
func appendPatch[T any](path string, admitted, injected []T, add func(string, any)) {
	switch {
	case len(injected) == len(admitted):
	case len(admitted) == 0:
		add(path, injected)
	default:
		appendPath := path + "/-"
		for i := len(admitted); i < len(injected); i++ {
			add(appendPath, &injected[i])
		}
	}
}

// resourceListPatch adds the contract's quantities that the request does
// not set (or sets to another value), or the whole list when the request has
// none. Inject keeps a quantity the request spells otherwise but equal.
func resourceListPatch(path string, admitted, injected corev1.ResourceList, contract *typeContract, add func(string, any)) {
	if admitted == nil {
		add(path, injected)
		return
	}
	var paths []string
	for i, name := range contract.resourceNames {
		if old, ok := admitted[name]; !ok || old.Cmp(contract.resources[name]) != 0 {
			if paths == nil {
				paths = contract.resourcePaths(path)
			}
			add(paths[i], contract.resourceValues[i])
		}
	}
}

// escapePointer escapes a map key as one JSON pointer token (RFC 6901).
func escapePointer(key string) string {
	if !strings.ContainsAny(key, "~/") {
		return key
	}
	return pointerEscaper.Replace(key)
}

var (
	pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
	// setAnnotations are the annotations every admission sets, with their
	// JSON pointers, in the order the patch adds them.
	setAnnotations = []struct{ key, path string }{
		{imperatorv1alpha1.AdmittedAtAnnotation, "/metadata/annotations/" + escapePointer(imperatorv1alpha1.AdmittedAtAnnotation)},
		{imperatorv1alpha1.InjectedAnnotation, "/metadata/annotations/" + escapePointer(imperatorv1alpha1.InjectedAnnotation)},
		{imperatorv1alpha1.HoldUIDAnnotation, "/metadata/annotations/" + escapePointer(imperatorv1alpha1.HoldUIDAnnotation)},
	}
)

// patchResponse allows the request with ops as its JSON patch.
func patchResponse(ops []jsonpatch.JsonPatchOperation) admission.Response {
	resp := admission.Response{Patches: ops, AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true}}
	if len(ops) > 0 {
		patchType := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &patchType
	}
	return resp
}

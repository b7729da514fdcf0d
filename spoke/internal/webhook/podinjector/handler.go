package podinjector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	webhookmetrics "github.com/imperator-federation/imperator/spoke/internal/webhook/metrics"
)

// WebhookPath is where the agent's webhook server serves the injector.
const WebhookPath = "/mutate-v1-pod"

// No +kubebuilder:webhook marker: MutatingWebhookConfiguration is the one
// registration. A marker cannot express its namespace and object selectors,
// and the manifest generated from one would send every pod of the cluster to
// the injector, failing their creation whenever the agent is down.
//
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch

// Handler is the admission handler of the Pod Resource Injector. It injects
// guest pods on CREATE and lets every other operation through untouched.
type Handler struct {
	// Reader finds Machines by their machine-group label, and CapacityHolds;
	// the manager's cache.
	Reader client.Reader
	// APIReader, when set, reads a CapacityHold the cache does not show
	// (yet): a guest created right after its hold would otherwise claim
	// nothing, for good, since only the injector stamps the claim.
	APIReader client.Reader
	// Clock stamps imperatorv1alpha1.AdmittedAtAnnotation on the guests
	// admitted.
	Clock clock.PassiveClock
	// contracts keeps the machine types' contracts by Machine
	// resourceVersion.
	contracts contractCache
}

var _ admission.Handler = (*Handler)(nil)

// NewHandler returns a Handler that reads Machines through reader. The
// handler decodes only the fields of a pod it reads (see admittedPod), so
// scheme is not used; it stays in the signature for the callers that wire
// every webhook alike.
func NewHandler(reader client.Reader, _ *runtime.Scheme) *Handler {
	return &Handler{Reader: reader, Clock: clock.RealClock{}}
}

// SetupWebhookWithManager serves the injector at WebhookPath on the manager's
// webhook server, reading Machines from the manager's cache. The Machine
// informer is registered now, so that it syncs with the cache instead of on
// the first admission request.
// clk stamps the admitted-at annotation (the agent's one clock,
// config.Config.Clock; nil: the system clock).
func SetupWebhookWithManager(mgr ctrl.Manager, clk clock.PassiveClock) error {
	// Before the manager starts, GetInformer only registers the informer and
	// does not block on the context.
	for _, obj := range []client.Object{&imperatorv1alpha1.Machine{}, &imperatorv1alpha1.CapacityHold{}} {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj); err != nil {
			return fmt.Errorf("registering the %T informer of the pod injector: %w", obj, err)
		}
	}
	handler := NewHandler(mgr.GetCache(), mgr.GetScheme())
	handler.APIReader = mgr.GetAPIReader()
	if clk != nil {
		handler.Clock = clk
	}
	mgr.GetWebhookServer().Register(WebhookPath, &webhook.Admission{
		Handler: webhookmetrics.Handler(webhookmetrics.PodInjector, handler),
	})
	return nil
}

// Handle injects a guest pod being created with its machine type and stamps
// the time it was admitted.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := ctrl.LoggerFrom(ctx)
	if req.Operation != admissionv1.Create {
		// Existing guest pods are never re-injected nor blocked.
		return admission.Allowed("")
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("decoding the pod: the request carries no object"))
	}
	admitted, err := decodeAdmittedPod(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err))
	}
	pod := admitted.pod()
	if pod.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) {
		return admission.Allowed("not a guest pod")
	}

	machine, err := h.machineOfGroup(ctx, pod.Labels[imperatorv1alpha1.MachineGroupKey])
	if err != nil {
		return refusal(ctx, err)
	}

	injected, record, err := inject(pod, machine, &h.contracts)
	if err != nil {
		return refusal(ctx, err)
	}

	// The queue orders guests by when they were admitted: creation
	// timestamps have one-second resolution. A value the user set is
	// overwritten.
	if injected.Annotations == nil {
		injected.Annotations = map[string]string{}
	}
	injected.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = h.Clock.Now().UTC().Format(time.RFC3339Nano)

	// The hold a guest claims is the one its name resolves to now; a UID the
	// user wrote is replaced or removed.
	holdUID, warning, err := holdClaim(ctx, h.Reader, h.APIReader, pod, req.Namespace)
	if err != nil {
		return refusal(ctx, err)
	}
	if holdUID != "" {
		injected.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = holdUID
	} else {
		delete(injected.Annotations, imperatorv1alpha1.HoldUIDAnnotation)
	}

	if log := log.V(1); log.Enabled() {
		log.Info("Injected guest pod", "machine", klog.KRef("", record.Machine),
			"machineType", record.MachineType, "container", record.Container, "replaced", len(record.Replaced))
	}
	contract := h.contracts.of(machine, record.MachineGroup, machine.MachineType(record.MachineType))
	resp := patchResponse(injectionPatch(admitted, injected, record.Container, contract))
	if warning != "" {
		resp.Warnings = append(resp.Warnings, warning)
	}
	return resp
}

// refusal answers a guest the handler cannot admit: a denial with the
// reason of a *DeniedError, else (the cache failed) an internal error,
// which the API server turns into a refusal too (failurePolicy Fail).
func refusal(ctx context.Context, err error) admission.Response {
	log := ctrl.LoggerFrom(ctx)
	var deniedErr *DeniedError
	if errors.As(err, &deniedErr) {
		log.V(1).Info("Denied guest pod", "reason", deniedErr.Reason)
		return admission.Denied(deniedErr.Reason)
	}
	log.Error(err, "Admitting a guest pod failed")
	return admission.Errored(http.StatusInternalServerError, err)
}

// machineOfGroup returns the Machine labelled with group, nil when there is
// none (or the pod names no group; Inject denies both), or a DeniedError when
// several Machines claim the group.
func (h *Handler) machineOfGroup(ctx context.Context, group string) (*imperatorv1alpha1.Machine, error) {
	if group == "" {
		return nil, nil
	}
	var machines imperatorv1alpha1.MachineList
	// The Machines are only read (Inject never modifies them): the cache
	// hands out its own objects instead of a deep copy per admission.
	if err := h.Reader.List(ctx, &machines, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Machines labelled %s=%s: %w", imperatorv1alpha1.MachineGroupKey, group, err)
	}
	switch len(machines.Items) {
	case 0:
		return nil, nil
	case 1:
		return &machines.Items[0], nil
	default:
		names := make([]string, 0, len(machines.Items))
		for _, m := range machines.Items {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		return nil, denied("ambiguous machine group %q: Machines %s are all labelled %s=%s",
			group, strings.Join(names, ", "), imperatorv1alpha1.MachineGroupKey, group)
	}
}

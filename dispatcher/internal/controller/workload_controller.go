package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Name is the dispatcher's name, Kueue's multiKueue.dispatcherName.
const Name = "imperator.tenzen-y.io/dispatcher"

// FieldManager is the field manager of the dispatcher's patches.
const FieldManager = "imperator-dispatcher"

// Event reasons on the Workload.
const (
	ReasonNominated     = "Nominated"
	ReasonNoClusterFits = "NoClusterFits"
	ReasonInvalidDemand = "InvalidDemand"
	eventAction         = "Dispatch"
)

// Reconciler nominates the worker clusters of pending MultiKueue Workloads.
type Reconciler struct {
	// Client reads Kueue's objects (from the cache) and patches Workloads.
	Client client.Client
	// Hub answers FindCapacity.
	Hub queryv1.QueryClient
	// Recorder writes the events people read on the Workload.
	Recorder events.EventRecorder
	// Limit is the most clusters nominated for one workload (1 to MaxNominated).
	Limit int
	// CallTimeout bounds each FindCapacity call.
	CallTimeout time.Duration
	// PlacementGrace is how long the units of a placed workload still count
	// as taken after Kueue placed it, until the hub's figures show its pods.
	PlacementGrace time.Duration

	// WithoutClaims leaves the units of nominations out of the decisions
	// (a burst may then be nominated to the same last units).
	WithoutClaims bool

	claimsOnce sync.Once
	inflight   *claims

	// said is the last event message per Workload, so that a workload
	// requeued by every change of the hub's figures gets an event only when
	// what it says changes.
	said sync.Map
}

// SetupWithManager registers the controller; hubChanges are the Workloads
// the hub's Watch stream requeues (HubWatch).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, hubChanges <-chan event.GenericEvent) error {
	wl := &unstructured.Unstructured{}
	wl.SetGroupVersionKind(WorkloadGVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("multikueue-dispatcher").
		For(wl).
		WatchesRawSource(source.Channel(hubChanges, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile nominates the clusters where the Workload fits now.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(WorkloadGVK)
	r.claimsOnce.Do(func() { r.inflight = newClaims(r.PlacementGrace) })
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.said.Delete(req.NamespacedName)
			r.inflight.drop(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	wl, err := decodeWorkload(u)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !wl.awaitingWorker() {
		r.said.Delete(req.NamespacedName)
		if wl.Status.ClusterName != nil && *wl.Status.ClusterName != "" && wl.DeletionTimestamp.IsZero() && !wl.conditionTrue(conditionFinished) {
			r.inflight.placed(req.NamespacedName, time.Now())
		} else {
			r.inflight.drop(req.NamespacedName)
		}
		return ctrl.Result{}, nil
	}
	check, workers, err := multiKueueCheck(ctx, r.Client, wl.pendingChecks())
	if err != nil || check == "" {
		return ctrl.Result{}, err
	}
	demands, err := Demands(wl.Spec.PodSets)
	if err != nil {
		r.say(u, corev1.EventTypeWarning, ReasonInvalidDemand, "cannot dispatch by capacity: "+err.Error())
		return ctrl.Result{}, nil
	}
	answers, err := r.ask(ctx, demands)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			r.say(u, corev1.EventTypeWarning, ReasonInvalidDemand, "the hub refused the demand: "+status.Convert(err).Message())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	others, claimEnds := r.inflight.others(req.NamespacedName, time.Now())
	if r.WithoutClaims {
		others, claimEnds = nil, time.Time{}
	}
	d := Decide(ApplyClaims(answers, others), workers, wl.Status.NominatedClusterNames, r.Limit)
	log.V(1).Info("Dispatch decision", "workload", klog.KObj(u), "check", check, "nominate", d.Nominate, "write", d.Write)
	if d.Write {
		if err := r.nominate(ctx, u, d.Nominate); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(d.Nominate) == 0 {
		r.inflight.drop(req.NamespacedName)
		r.say(u, corev1.EventTypeWarning, ReasonNoClusterFits, d.Reason)
		if !claimEnds.IsZero() {
			// A placed workload's claim may be all that keeps this one
			// out; the hub sends no change when the claim ends.
			return ctrl.Result{RequeueAfter: time.Until(claimEnds) + 100*time.Millisecond}, nil
		}
		return ctrl.Result{}, nil
	}
	r.inflight.set(req.NamespacedName, Claim{HubClusters: hubClusters(workers, d.Nominate), Demands: demands})
	r.say(u, corev1.EventTypeNormal, ReasonNominated, fmt.Sprintf("nominated %s: room for %s now",
		strings.Join(d.Nominate, ", "), describe(demands)))
	return ctrl.Result{}, nil
}

// hubClusters are the hub clusters of the named workers.
func hubClusters(workers []Worker, names []string) []string {
	var out []string
	for _, w := range workers {
		if slices.Contains(names, w.Name) && !slices.Contains(out, w.HubCluster) {
			out = append(out, w.HubCluster)
		}
	}
	return out
}

// ask asks the hub where each demand fits.
func (r *Reconciler) ask(ctx context.Context, demands []Demand) ([]Answer, error) {
	answers := make([]Answer, 0, len(demands))
	for _, d := range demands {
		callCtx, cancel := context.WithTimeout(ctx, r.CallTimeout)
		resp, err := r.Hub.FindCapacity(callCtx, d.Request())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("asking the hub for %s: %w", d, err)
		}
		answers = append(answers, Answer{Demand: d, Response: resp})
	}
	return answers, nil
}

// nominate writes names (none: the field is removed) as the Workload's
// status.nominatedClusterNames with a merge patch under the
// resourceVersion the decision was made on.
func (r *Reconciler) nominate(ctx context.Context, u *unstructured.Unstructured, names []string) error {
	var list any // JSON null removes the field
	if len(names) > 0 {
		list = names
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"status":   map[string]any{"nominatedClusterNames": list},
	})
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("writing status.nominatedClusterNames of Workload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// say records an event on the Workload unless the last one said the same.
func (r *Reconciler) say(u *unstructured.Unstructured, eventType, reason, note string) {
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	said := reason + "\x00" + note
	if prev, ok := r.said.Swap(key, said); ok && prev.(string) == said {
		return
	}
	r.Recorder.Eventf(u, nil, eventType, reason, eventAction, "%s", note)
}

// pending reports whether u is a Workload the dispatcher acts on, from the
// Workload alone (the check's kind is read in Reconcile).
func pending(u *unstructured.Unstructured) bool {
	wl, err := decodeWorkload(u)
	return err == nil && wl.awaitingWorker() && len(wl.pendingChecks()) > 0
}

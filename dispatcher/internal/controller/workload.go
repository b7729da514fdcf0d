package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Kueue API the dispatcher reads and writes (kueue.x-k8s.io/v1beta2 of
// Kueue v0.17.0). The module sigs.k8s.io/kueue is not a dependency: it
// requires other k8s.io versions than ours. Objects are unstructured and
// the few fields read are decoded into the minimal types below.
var (
	KueueGroupVersion    = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}
	WorkloadGVK          = KueueGroupVersion.WithKind("Workload")
	AdmissionCheckGVK    = KueueGroupVersion.WithKind("AdmissionCheck")
	MultiKueueConfigGVK  = KueueGroupVersion.WithKind("MultiKueueConfig")
	MultiKueueClusterGVK = KueueGroupVersion.WithKind("MultiKueueCluster")
)

// Kueue's names the dispatcher relies on.
const (
	// MultiKueueControllerName is the controllerName of MultiKueue's AdmissionChecks.
	MultiKueueControllerName = "kueue.x-k8s.io/multikueue"
	conditionQuotaReserved   = "QuotaReserved"
	conditionFinished        = "Finished"
	checkStatePending        = "Pending"
)

// Workload is what the dispatcher reads of a Kueue Workload.
type Workload struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		PodSets []PodSet `json:"podSets"`
	} `json:"spec"`
	Status WorkloadStatus `json:"status"`
}

// WorkloadStatus is what the dispatcher reads of a Workload's status.
type WorkloadStatus struct {
	Conditions            []metav1.Condition    `json:"conditions,omitempty"`
	AdmissionChecks       []AdmissionCheckState `json:"admissionChecks,omitempty"`
	ClusterName           *string               `json:"clusterName,omitempty"`
	NominatedClusterNames []string              `json:"nominatedClusterNames,omitempty"`
}

// AdmissionCheckState is a Workload's state of one admission check.
type AdmissionCheckState struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// decodeWorkload reads u as a Workload.
func decodeWorkload(u *unstructured.Unstructured) (*Workload, error) {
	wl := &Workload{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, wl); err != nil {
		return nil, fmt.Errorf("reading Workload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return wl, nil
}

// conditionTrue reports whether the condition of type t is True.
func (w *Workload) conditionTrue(t string) bool {
	for _, c := range w.Status.Conditions {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// awaitingWorker reports whether Kueue waits for a worker cluster for the
// workload, as Kueue's own dispatchers decide it: quota reserved on the
// manager, not finished, no status.clusterName; whether its MultiKueue
// check is Pending is for the caller (it must know which check that is).
func (w *Workload) awaitingWorker() bool {
	return w.DeletionTimestamp.IsZero() && w.conditionTrue(conditionQuotaReserved) &&
		!w.conditionTrue(conditionFinished) && (w.Status.ClusterName == nil || *w.Status.ClusterName == "")
}

// pendingChecks are the names of the workload's Pending admission checks.
func (w *Workload) pendingChecks() []string {
	var out []string
	for _, c := range w.Status.AdmissionChecks {
		if c.State == checkStatePending {
			out = append(out, c.Name)
		}
	}
	return out
}

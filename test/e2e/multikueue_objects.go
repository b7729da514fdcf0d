package e2e

import (
	"context"
	"fmt"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/kueue"
)

// kueueObject is a Kueue object of kind.
func kueueObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// multiKueueQuota is a ClusterQueue of ample quota (the units, not Kueue's
// quota, are what is short) with checks.
func multiKueueQuota(name string, checks []any) *unstructured.Unstructured {
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
			"flavors": []any{map[string]any{"name": "mk-flavor", "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "2000"},
				map[string]any{"name": "memory", "nominalQuota": "20Ti"},
				map[string]any{"name": "nvidia.com/gpu", "nominalQuota": "100"},
			}}},
		}},
	}
	if checks != nil {
		spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": checks}
	}
	return kueueObject("ClusterQueue", "", name, spec)
}

// multiKueueWorkerObjects are a worker's queues: no admission check.
func multiKueueWorkerObjects(namespace string) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		kueueObject("ResourceFlavor", "", "mk-flavor", map[string]any{}),
		multiKueueQuota(namespace, nil),
		kueueObject("LocalQueue", namespace, mkQueue, map[string]any{"clusterQueue": namespace}),
	}
}

// multiKueueManagerObjects are the manager's objects of docs/multikueue.md.
func multiKueueManagerObjects(in MultiKueueInput, workers map[string]*Cluster) []client.Object {
	var objs []client.Object
	names := []string{in.Small, in.Big}
	for _, name := range names {
		kubeconfig, err := kueue.WorkerKubeconfig(workers[name].Config)
		Expect(err).NotTo(HaveOccurred())
		objs = append(objs,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kueue.Namespace, Name: "mk-" + name}, Data: map[string][]byte{"kubeconfig": kubeconfig}},
			kueueObject("MultiKueueCluster", "", name, map[string]any{
				"clusterSource": map[string]any{"kubeConfig": map[string]any{"locationType": "Secret", "location": "mk-" + name}},
			}))
	}
	return append(objs,
		kueueObject("MultiKueueConfig", "", mkConfig, map[string]any{"clusters": []any{in.Small, in.Big}}),
		kueueObject("AdmissionCheck", "", mkConfig, map[string]any{
			"controllerName": "kueue.x-k8s.io/multikueue",
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": mkConfig},
		}),
		kueueObject("ResourceFlavor", "", "mk-flavor", map[string]any{}),
		multiKueueQuota(in.Namespace, []any{map[string]any{"name": mkConfig}}),
		kueueObject("LocalQueue", in.Namespace, mkQueue, map[string]any{"clusterQueue": in.Namespace}),
	)
}

// kueueConditions are the conditions of the cluster-scoped Kueue object
// kind/name, status by type.
func kueueConditions(ctx context.Context, g Gomega, c client.Client, kind, name string) map[string]string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, u)).To(Succeed())
	return kueueConditionsOf(u)
}

func kueueConditionsOf(u *unstructured.Unstructured) map[string]string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := map[string]string{}
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		out[fmt.Sprint(m["type"])] = fmt.Sprint(m["status"])
	}
	return out
}

// multiKueueJob is a suspended Job of parallelism pods in the journey's
// queue, managed by MultiKueue, each pod a guest of the journey's type
// stating one unit; kwok keeps its pods running for an hour.
func multiKueueJob(namespace, name string, parallelism int32) *batchv1.Job {
	unit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		"nvidia.com/gpu": resource.MustParse("2")}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{kueueJobLabel: mkQueue}},
		Spec: batchv1.JobSpec{
			ManagedBy:   ptr.To("kueue.x-k8s.io/multikueue"),
			Suspend:     ptr.To(true),
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(parallelism),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: mkGroup, imperatorv1alpha1.MachineTypeKey: mkType,
						imperatorv1alpha1.PodRoleKey: "guest"},
					// kwok takes the smaller of delay and jitter-delay.
					Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h",
						"pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1h"},
				},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "train", Image: "registry.example/trainer:1",
						Resources: corev1.ResourceRequirements{Requests: unit, Limits: unit}}},
				},
			},
		},
	}
}

// jobWorkload is the manager's Workload of job.
func jobWorkload(ctx context.Context, g Gomega, c client.Client, job *batchv1.Job) *unstructured.Unstructured {
	wls := &unstructured.UnstructuredList{}
	wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	g.Expect(c.List(ctx, wls, client.InNamespace(job.Namespace))).To(Succeed())
	for i, w := range wls.Items {
		if owner := w.GetOwnerReferences(); len(owner) > 0 && owner[0].UID == job.UID {
			return &wls.Items[i]
		}
	}
	g.Expect(job.UID).To(BeEmpty(), "no Workload of Job %s yet", job.Name) // fails: the job has a UID
	return nil
}

package machine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// observer is the benchmark's view of the cluster: informers on the nodes
// (metadata only), the reservation StatefulSets and the pods of the guest
// and agent namespaces, stripped to what the phases need.
type observer struct {
	cache  cache.Cache
	cancel context.CancelFunc
	done   chan struct{}
}

func startObserver(ctx context.Context, env *framework.Environment, guests string) (*observer, error) {
	c, err := cache.New(env.Config, cache.Options{
		Scheme: env.Scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {
				Namespaces: map[string]cache.Config{guests: {}, agentNamespace: {}},
				Transform:  keepPodPhaseAndNode,
			},
			&appsv1.StatefulSet{}: {Namespaces: map[string]cache.Config{agentNamespace: {}}},
		},
	})
	if err != nil {
		return nil, err
	}
	nodes := &metav1.PartialObjectMetadata{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	for _, obj := range []client.Object{&corev1.Pod{}, &appsv1.StatefulSet{}, nodes} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &observer{cache: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		_ = c.Start(ctx) // returns nil when ctx ends; a failed start shows as a wait that times out
	}()
	if !c.WaitForCacheSync(ctx) {
		o.stop()
		return nil, errors.New("the benchmark's informers did not sync")
	}
	return o, nil
}

func (o *observer) stop() {
	o.cancel()
	<-o.done
}

// keepPodPhaseAndNode drops from a pod all the observer does not read.
func keepPodPhaseAndNode(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase, Conditions: slices.DeleteFunc(slices.Clone(pod.Status.Conditions), func(c corev1.PodCondition) bool { return c.Type != corev1.PodReady })},
	}, nil
}

// describe says how far the reservations got: StatefulSets by state and
// the agent namespace's pods by phase, for a run that did not converge.
func (o *observer) describe(ctx context.Context, replicas int32) string {
	sets := &appsv1.StatefulSetList{}
	pods := &corev1.PodList{}
	if err := errors.Join(
		o.cache.List(ctx, sets, client.InNamespace(agentNamespace), client.UnsafeDisableDeepCopy),
		o.cache.List(ctx, pods, client.InNamespace(agentNamespace), client.UnsafeDisableDeepCopy),
	); err != nil {
		return err.Error()
	}
	var notReady []string
	for _, s := range sets.Items {
		if s.Spec.Replicas == nil || *s.Spec.Replicas != replicas || s.Status.Replicas != replicas || s.Status.ReadyReplicas != replicas {
			notReady = append(notReady, fmt.Sprintf("%s(spec %d, replicas %d, ready %d, revisions %s/%s)",
				s.Name, ptr.Deref(s.Spec.Replicas, -1), s.Status.Replicas, s.Status.ReadyReplicas, s.Status.CurrentRevision, s.Status.UpdateRevision))
		}
	}
	var unbound, deleting, pending, running, ready int
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
			deleting++
		case p.Spec.NodeName == "":
			unbound++
		case p.Status.Phase != corev1.PodRunning:
			pending++
		default:
			running++
			if slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
				ready++
			}
		}
	}
	count := len(notReady)
	if count > 5 {
		notReady = append(notReady[:5], fmt.Sprintf("and %d more", count-5))
	}
	return fmt.Sprintf("%d/%d StatefulSets not ready: %s; reservation pods: %d unbound, %d bound not running, %d running (%d ready), %d deleting",
		count, len(sets.Items), strings.Join(notReady, ", "), unbound, pending, running, ready, deleting)
}

// waitPodsRunning waits until namespace has want Running pods.
func (o *observer) waitPodsRunning(ctx context.Context, namespace string, want int) error {
	var running int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := o.cache.List(ctx, pods, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		running = 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d running guests (%d): %w", want, running, err)
	}
	return nil
}

// nodesLabelled reports whether all want nodes are node-pool=ready.
func (o *observer) nodesLabelled(ctx context.Context, want int) (bool, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := o.cache.List(ctx, nodes, client.MatchingLabels{imperatorv1alpha1.NodePoolKey: string(imperatorv1alpha1.NodePoolReady)}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	return len(nodes.Items) == want, nil
}

// reservationPhases reports whether each of the machines reservation
// StatefulSets asks for replicas pods (declared), has them (created), bound
// to nodes and ready.
func (o *observer) reservationPhases(ctx context.Context, machines int, replicas int32) ([4]bool, error) {
	var done [4]bool
	sets := &appsv1.StatefulSetList{}
	if err := o.cache.List(ctx, sets, client.InNamespace(agentNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return done, err
	}
	var declared, created, ready int
	for _, s := range sets.Items {
		if s.Spec.Replicas == nil || *s.Spec.Replicas != replicas {
			continue
		}
		declared++
		if s.Status.Replicas == replicas {
			created++
		}
		if s.Status.Replicas == replicas && s.Status.ReadyReplicas == replicas {
			ready++
		}
	}
	done[0], done[1], done[3] = declared == machines, created == machines, ready == machines
	if done[1] {
		pods := &corev1.PodList{}
		if err := o.cache.List(ctx, pods, client.InNamespace(agentNamespace), client.UnsafeDisableDeepCopy); err != nil {
			return done, err
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				bound++
			}
		}
		done[2] = bound == machines*int(replicas)
	}
	// Ready implies bound, also when a poll missed the moment.
	done[2] = done[2] || done[3]
	return done, nil
}

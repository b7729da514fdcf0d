package admissionpolicy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// FirstSight stamps imperatorv1alpha1.AdmittedAtAnnotation on the guests
// the injection policy admitted (CEL has no clock), in the order the agent
// first sees them, so the Machine controller's queue stays first come,
// first served. A watch delivers creations in etcd's commit order; the
// stamp is the guest's creation second plus its rank among the guests of
// that second (nanoseconds), so it stays within the second the queue
// accepts a stamp in (machine.admittedAt) and orders guests created within
// one second as they were committed. Guests created while the agent was
// away are seen in its first list, which is in name order: they are ranked
// by creation second, then resourceVersion (a pod not changed since its
// creation still carries its creation's revision), after the guests of
// their second stamped before.
type FirstSight struct {
	// Clientset watches guest pods; Client patches them.
	Clientset kubernetes.Interface
	Client    client.Client

	mu sync.Mutex
	// ranks is the highest rank stamped or seen per creation second.
	ranks map[int64]int64
	// pending are the guests seen without a stamp, in the order seen;
	// assigned those stamped whose stamp the watch has not shown yet.
	pending  []*corev1.Pod
	assigned map[types.UID]bool
	wake     chan struct{}
}

// Start watches guest pods until ctx ends (manager.Runnable).
func (f *FirstSight) Start(ctx context.Context) error {
	f.ranks = map[int64]int64{}
	f.assigned = map[types.UID]bool{}
	f.wake = make(chan struct{}, 1)
	selector := imperatorv1alpha1.PodRoleKey + "=" + string(imperatorv1alpha1.PodRoleGuest)
	pods := f.Clientset.CoreV1().Pods(metav1.NamespaceAll)
	informer := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return pods.Watch(ctx, opts)
		},
	}, &corev1.Pod{}, 0, toolscache.Indexers{})
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { f.see(obj) },
		UpdateFunc: func(_, obj any) { f.see(obj) },
	}); err != nil {
		return fmt.Errorf("watching guest pods: %w", err)
	}
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil
	}
	// The first list is whole: rank what it held by creation, then
	// revision, not by name.
	f.mu.Lock()
	slices.SortStableFunc(f.pending, listOrder)
	f.mu.Unlock()
	for {
		f.stampPending(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-f.wake:
		}
	}
}

// NeedLeaderElection says that one replica stamps: the leader.
func (f *FirstSight) NeedLeaderElection() bool { return true }

// see records a guest's stamp, or queues it for one.
func (f *FirstSight) see(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !pod.DeletionTimestamp.IsZero() || !injectedGuest(pod) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	second := pod.CreationTimestamp.Unix()
	if stamp, ok := stampOf(pod); ok {
		delete(f.assigned, pod.UID)
		if stamp.Unix() == second {
			f.ranks[second] = max(f.ranks[second], int64(stamp.Nanosecond()))
		}
		return
	}
	if f.assigned[pod.UID] || slices.ContainsFunc(f.pending, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		return
	}
	f.pending = append(f.pending, pod)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// stampPending stamps the queued guests in order.
func (f *FirstSight) stampPending(ctx context.Context) {
	f.mu.Lock()
	pending := f.pending
	f.pending = nil
	stamps := make([]time.Time, len(pending))
	for i, pod := range pending {
		second := pod.CreationTimestamp.Unix()
		f.ranks[second]++
		stamps[i] = time.Unix(second, f.ranks[second]).UTC()
		f.assigned[pod.UID] = true
	}
	f.mu.Unlock()
	log := ctrl.LoggerFrom(ctx).WithName("first-sight")
	for i, pod := range pending {
		patch := client.MergeFrom(pod.DeepCopy())
		stamped := pod.DeepCopy()
		if stamped.Annotations == nil {
			stamped.Annotations = map[string]string{}
		}
		stamped.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = stamps[i].Format(time.RFC3339Nano)
		if err := f.Client.Patch(ctx, stamped, patch); client.IgnoreNotFound(err) != nil {
			log.Error(err, "Stamping a guest's arrival failed", "pod", client.ObjectKeyFromObject(pod))
		}
	}
}

// injectedGuest: a guest the injector recorded, still at the slot gate.
func injectedGuest(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]; !ok {
		return false
	}
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == imperatorv1alpha1.SlotSchedulingGate
	})
}

// stampOf is the guest's admitted-at, when it has a readable one (the
// webhook's, or ours).
func stampOf(pod *corev1.Pod) (time.Time, bool) {
	value, ok := pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	return t, err == nil
}

// listOrder ranks guests of a list: by creation second, then
// resourceVersion (etcd's revision, a number), then UID.
func listOrder(a, b *corev1.Pod) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(revision(a), revision(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}

// revision is the pod's resourceVersion as a number (0 when it is not one).
func revision(pod *corev1.Pod) uint64 {
	rv, _ := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	return rv
}

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
//
// In the same patch it stamps imperatorv1alpha1.HoldUIDAnnotation on a
// guest that claims a CapacityHold (HoldClaim): a policy's parameters are
// Machines and cannot resolve a hold's name. A stamp patch that fails is
// retried, in order, with a capped backoff, unless the API server refuses
// it for what the guest is (refusedForGood: annotations already at the
// size limit, say): that guest is left unstamped instead of holding up
// every guest after it.
type FirstSight struct {
	// Clientset watches guest pods; Client patches them and reads
	// CapacityHolds; APIReader, when set, reads a hold Client does not show
	// (yet).
	Clientset kubernetes.Interface
	Client    client.Client
	APIReader client.Reader

	mu sync.Mutex
	// guests is the informer's store, indexed by creation second.
	guests toolscache.Indexer
	// pending are the guests seen without a stamp, in the order seen;
	// inflight the stamps patched that the watch has not shown yet. Both
	// only hold guests waiting for their stamp: a guest shown stamped, or
	// deleted, leaves them.
	pending  []*corev1.Pod
	inflight map[types.UID]time.Time
	wake     chan struct{}
}

// byCreationSecond indexes guests by their creation second.
const byCreationSecond = "metadata.creationTimestamp.second"

func creationSecondIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	return []string{strconv.FormatInt(pod.CreationTimestamp.Unix(), 10)}, nil
}

// Retry bounds of a failed stamp.
const (
	firstRetry = 500 * time.Millisecond
	lastRetry  = 30 * time.Second
)

// Start watches guest pods until ctx ends (manager.Runnable).
func (f *FirstSight) Start(ctx context.Context) error {
	f.inflight = map[types.UID]time.Time{}
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
	}, &corev1.Pod{}, 0, toolscache.Indexers{byCreationSecond: creationSecondIndex})
	f.guests = informer.GetIndexer()
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { f.see(obj) },
		UpdateFunc: func(_, obj any) { f.see(obj) },
		DeleteFunc: f.forget,
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
	backoff := time.Duration(0)
	for {
		var retry <-chan time.Time
		if f.stampPending(ctx) {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, firstRetry), lastRetry)
			retry = time.After(backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.wake:
		case <-retry:
		}
	}
}

// NeedLeaderElection says that one replica stamps: the leader.
func (f *FirstSight) NeedLeaderElection() bool { return true }

// see queues a guest waiting for its stamp, or takes it off inflight once
// the watch shows it stamped.
func (f *FirstSight) see(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, stamped := pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]; stamped || !pod.DeletionTimestamp.IsZero() || !injectedGuest(pod) {
		f.dropLocked(pod.UID)
		return
	}
	if _, ok := f.inflight[pod.UID]; ok || slices.ContainsFunc(f.pending, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		return
	}
	f.pending = append(f.pending, pod)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// forget drops a deleted guest.
func (f *FirstSight) forget(obj any) {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		f.mu.Lock()
		f.dropLocked(pod.UID)
		f.mu.Unlock()
	}
}

// dropLocked takes uid off pending and inflight.
func (f *FirstSight) dropLocked(uid types.UID) {
	delete(f.inflight, uid)
	f.pending = slices.DeleteFunc(f.pending, func(p *corev1.Pod) bool { return p.UID == uid })
}

// stampPending stamps the queued guests in order; it returns false when a
// stamp failed: that guest and those after it are queued again, in the
// same order, for a retry.
func (f *FirstSight) stampPending(ctx context.Context) bool {
	log := ctrl.LoggerFrom(ctx).WithName("first-sight")
	for {
		f.mu.Lock()
		if len(f.pending) == 0 {
			f.mu.Unlock()
			return true
		}
		pod := f.pending[0]
		stamp := NextStamp(pod.CreationTimestamp.Unix(), f.stampsOfSecondLocked(pod.CreationTimestamp.Unix()))
		f.mu.Unlock()

		holdUID, err := HoldClaim(ctx, f.Client, f.APIReader, pod)
		if err == nil {
			err = f.patch(ctx, pod, stamp, holdUID)
		}

		f.mu.Lock()
		if len(f.pending) == 0 || f.pending[0].UID != pod.UID {
			// Deleted or shown stamped meanwhile.
			f.mu.Unlock()
			continue
		}
		if err != nil && refusedForGood(err) {
			// The API server refuses this very patch (the guest's
			// annotations leave no room for the stamp, say): retrying it
			// would hold up every guest after it for ever. It goes by its
			// creation time and claims no hold; its next update queues it
			// again.
			f.pending = f.pending[1:]
			f.mu.Unlock()
			log.Error(err, "The API server refuses this guest's arrival stamp; leaving it unstamped", "pod", klogRef(pod))
			continue
		}
		if err != nil {
			f.mu.Unlock()
			log.Error(err, "Stamping a guest's arrival failed; retrying", "pod", klogRef(pod))
			return false
		}
		f.pending = f.pending[1:]
		f.inflight[pod.UID] = stamp
		f.mu.Unlock()
	}
}

// patch writes the stamp, and the hold's UID when the guest claims one.
func (f *FirstSight) patch(ctx context.Context, pod *corev1.Pod, stamp time.Time, holdUID string) error {
	patch := client.MergeFrom(pod.DeepCopy())
	stamped := pod.DeepCopy()
	if stamped.Annotations == nil {
		stamped.Annotations = map[string]string{}
	}
	stamped.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = stamp.Format(time.RFC3339Nano)
	if holdUID != "" {
		stamped.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = holdUID
	}
	if err := f.Client.Patch(ctx, stamped, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patching pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// refusedForGood tells whether the API server refused a stamp for what the
// guest is, so that the same patch would be refused again.
func refusedForGood(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// stampsOfSecondLocked are the stamps within second of the guests created
// in it: those the cache shows and those patched it does not show yet.
func (f *FirstSight) stampsOfSecondLocked(second int64) []time.Time {
	var stamps []time.Time
	objs, _ := f.guests.ByIndex(byCreationSecond, strconv.FormatInt(second, 10))
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			if stamp, ok := stampOf(pod); ok {
				stamps = append(stamps, stamp)
			}
		}
	}
	for _, stamp := range f.inflight {
		stamps = append(stamps, stamp)
	}
	return stamps
}

// maxRank is the last nanosecond of a second: a stamp past it would leave
// the creation second, where the queue no longer takes it (the guest would
// then go by its creation time, ahead of its second's stamped guests).
const maxRank = int64(time.Second - 1)

// NextStamp is the stamp of the next guest first seen of creation second:
// one nanosecond after the latest stamp of that second in stamps (other
// seconds' are ignored), or second + 1 ns. A stamp at the second's last
// nanosecond (the webhook's clock, before a switch of paths) cannot push
// it out of the second: it stays at the last nanosecond, tied with that
// stamp, and the queue breaks the tie by UID.
func NextStamp(second int64, stamps []time.Time) time.Time {
	rank := int64(0)
	for _, stamp := range stamps {
		if stamp.Unix() == second {
			rank = max(rank, int64(stamp.Nanosecond()))
		}
	}
	return time.Unix(second, min(rank+1, maxRank)).UTC()
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

// klogRef names a pod in logs.
func klogRef(pod *corev1.Pod) client.ObjectKey { return client.ObjectKeyFromObject(pod) }

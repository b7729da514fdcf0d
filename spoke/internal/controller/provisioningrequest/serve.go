package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// DefaultRecheckInterval is how often the Server asks the API server's
// discovery whether it serves ProvisioningRequests: one small GET.
const DefaultRecheckInterval = 30 * time.Second

// Server runs the Controller while the API server serves the
// ProvisioningRequest CRD: it asks discovery when it starts and every
// RecheckInterval, starts the Controller when the CRD appears (installed
// after the agent started: no restart needed), and stops it when the CRD
// goes, removing the requests' informer (whose watch would fail on and on)
// and releasing the holds made for requests, which went with the CRD. It
// serves the local cluster: hosted mode does not serve ProvisioningRequests
// (docs/kueue.md).
type Server struct {
	mgr      mcmanager.Manager
	r        *Controller
	served   func() (bool, error)
	interval time.Duration

	mu      sync.Mutex
	running *run
}

// run is one start of the Controller.
type run struct {
	cancel context.CancelFunc
	done   chan error
}

// NewServer returns the Server of a Controller for mgr's local cluster;
// mgr.GetLocalManager().Add(server) runs it.
func NewServer(mgr mcmanager.Manager, opts Options) (*Server, error) {
	if opts.Clock == nil {
		return nil, errors.New("provisioning request server: Options.Clock is nil")
	}
	if opts.MaxUnitsPerNamespace < 0 {
		return nil, fmt.Errorf("provisioning request server: MaxUnitsPerNamespace %d must not be negative", opts.MaxUnitsPerNamespace)
	}
	if opts.RecheckInterval < 0 {
		return nil, fmt.Errorf("provisioning request server: RecheckInterval %s must not be negative", opts.RecheckInterval)
	}
	interval := opts.RecheckInterval
	if interval == 0 {
		interval = DefaultRecheckInterval
	}
	config := mgr.GetLocalManager().GetConfig()
	return &Server{mgr: mgr, r: &Controller{mgr: mgr, now: opts.Clock.Now, opts: opts}, interval: interval,
		served: func() (bool, error) { return Served(config) }}, nil
}

// Serving tells whether the Controller runs now.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running != nil
}

// Start checks discovery until ctx ends, starting and stopping the
// Controller as the CRD comes and goes; it stops the Controller on return.
func (s *Server) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("spoke").WithValues("provisioningClass", imperatorv1alpha1.CapacityHoldProvisioningClass)
	first := true
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		s.check(ctx, log, first)
		first = false
	}, s.interval)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		s.running.cancel()
		<-s.running.done
		s.running = nil
	}
	return nil
}

// check starts or stops the Controller as discovery says; first logs that
// the CRD is missing at the start.
func (s *Server) check(ctx context.Context, log interface {
	Info(string, ...any)
	Error(error, string, ...any)
}, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		select {
		case err := <-s.running.done:
			// Ended on its own (its caches did not sync): start again.
			log.Error(err, "The ProvisioningRequest controller stopped; starting it again")
			s.running = nil
		default:
		}
	}
	served, err := s.served()
	if err != nil {
		// Not an answer: keep things as they are.
		log.Error(err, "Checking whether the API server serves ProvisioningRequests")
		return
	}
	switch {
	case served && s.running == nil:
		running, err := s.start(ctx)
		if err != nil {
			log.Error(err, "Starting the ProvisioningRequest controller")
			return
		}
		s.running = running
		log.Info("Serving ProvisioningRequests")
	case !served && s.running != nil:
		s.running.cancel()
		<-s.running.done
		s.running = nil
		errs := []error{s.mgr.GetLocalManager().GetCache().RemoveInformer(ctx, &ProvisioningRequest{}), s.releaseAll(ctx)}
		if err := errors.Join(errs...); err != nil {
			log.Error(err, "Stopping the ProvisioningRequest controller")
		}
		log.Info("Stopped serving ProvisioningRequests: the API server no longer serves autoscaling.x-k8s.io/v1 provisioningrequests (the CRD was removed)")
	case !served && first:
		log.Info("Not serving ProvisioningRequests: the API server does not serve autoscaling.x-k8s.io/v1 provisioningrequests; the agent looks again regularly (install the CRD)",
			"every", s.interval)
	}
}

// start builds the Controller on the local cluster's cache and starts it
// under a context of its own.
func (s *Server) start(ctx context.Context) (*run, error) {
	local := s.mgr.GetLocalManager()
	copts := controller.TypedOptions[mcreconcile.Request]{Reconciler: s.r, SkipNameValidation: ptr.To(true),
		Logger: local.GetLogger().WithValues("controller", "provisioningrequest")}
	copts.DefaultFromConfig(local.GetControllerOptions())
	c, err := controller.NewTypedUnmanaged("provisioningrequest", copts)
	if err != nil {
		return nil, fmt.Errorf("creating the provisioning request controller: %w", err)
	}
	cc := local.GetCache()
	err = errors.Join(
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&ProvisioningRequest{}), handler.TypedEnqueueRequestsFromMapFunc(inLocalCluster(itself)),
			predicate.NewTypedPredicateFuncs(ofOurClass))),
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&imperatorv1alpha1.CapacityHold{}), handler.TypedEnqueueRequestsFromMapFunc(inLocalCluster(holdToRequest)))),
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&corev1.Pod{}), handler.TypedEnqueueRequestsFromMapFunc(inLocalCluster(consumerToRequest)))))
	if err != nil {
		return nil, fmt.Errorf("setting up the provisioning request controller's watches: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &run{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := c.Start(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("ended")
		}
		r.done <- err
	}()
	return r, nil
}

// releaseAll deletes every hold made for a ProvisioningRequest: the
// requests went with their CRD.
func (s *Server) releaseAll(ctx context.Context) error {
	c := s.mgr.GetLocalManager().GetClient()
	list := &imperatorv1alpha1.CapacityHoldList{}
	if err := c.List(ctx, list, client.HasLabels{RequestNamespaceLabel}); err != nil {
		return fmt.Errorf("listing the CapacityHolds of ProvisioningRequests: %w", err)
	}
	var errs []error
	for i := range list.Items {
		errs = append(errs, s.r.deleteHold(ctx, c, &list.Items[i], "the ProvisioningRequest CRD was removed"))
	}
	return errors.Join(errs...)
}

// itself maps a request to itself.
func itself(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
}

// inLocalCluster makes a mapping's requests requests of the local cluster.
func inLocalCluster(f func(context.Context, client.Object) []reconcile.Request) handler.TypedMapFunc[client.Object, mcreconcile.Request] {
	return func(ctx context.Context, obj client.Object) []mcreconcile.Request {
		in := f(ctx, obj)
		if len(in) == 0 {
			return nil
		}
		out := make([]mcreconcile.Request, len(in))
		for i, r := range in {
			out[i] = mcreconcile.Request{Request: r}
		}
		return out
	}
}

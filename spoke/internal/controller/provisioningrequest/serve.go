package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// DefaultRecheckInterval is how often the Server asks the API server's
// discovery whether it serves ProvisioningRequests: one small GET.
const DefaultRecheckInterval = 30 * time.Second

// goneAfter is how many answers in a row that the CRD is not served stop
// the Controller and release the requests' holds: one such answer can be an
// API server starting behind a load balancer, its CRD handler not ready
// yet, and releasing every booking on it would be wrong.
const goneAfter = 2

// Server runs the Controller on a cluster while its API server serves the
// ProvisioningRequest CRD: it asks discovery when it starts and every
// RecheckInterval, starts the Controller when the CRD appears (installed
// after the agent started: no restart needed), and stops it when the CRD
// goes, removing the requests' informer (whose watch would fail on and on)
// and releasing the holds made for requests, which went with the CRD. The
// in-cluster agent's Server serves the local cluster; a hosted agent's
// serves every member it is engaged with, each on its own, for as long as
// the member is served.
type Server struct {
	mgr      mcmanager.Manager
	r        *Controller
	interval time.Duration
	// served tells whether the API server of config serves the CRD
	// (Served; replaced by tests).
	served func(*rest.Config) (bool, error)

	mu       sync.Mutex
	clusters map[multicluster.ClusterName]*clusterServer
}

// clusterServer is the Server's state for one cluster.
type clusterServer struct {
	name    multicluster.ClusterName
	cluster cluster.Cluster
	// running is the Controller's run, nil while it does not run.
	running *run
	// absent counts the answers in a row, while running, that the CRD is
	// not served.
	absent int
}

// run is one start of the Controller.
type run struct {
	cancel context.CancelFunc
	done   chan error
}

// NewServer returns the Server of a Controller for mgr's clusters; mgr.Add
// (server) runs it.
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
	return &Server{mgr: mgr, r: &Controller{mgr: mgr, now: opts.Clock.Now, opts: opts}, interval: interval, served: Served,
		clusters: map[multicluster.ClusterName]*clusterServer{}}, nil
}

// Serving tells whether the Controller runs now on the cluster name (""
// the local cluster).
func (s *Server) Serving(name multicluster.ClusterName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, ok := s.clusters[name]
	return ok && cs.running != nil
}

// Start serves the local cluster until ctx ends when mgr has no provider
// (the in-cluster agent); with one (hosted mode) the members are served as
// they are engaged (Engage), and Start waits for ctx.
func (s *Server) Start(ctx context.Context) error {
	if s.mgr.GetProvider() != nil {
		<-ctx.Done()
		return nil
	}
	cs := &clusterServer{cluster: s.mgr.GetLocalManager()}
	s.mu.Lock()
	s.clusters[""] = cs
	s.mu.Unlock()
	s.serve(ctx, cs)
	return nil
}

// Engage serves the member cluster cl until ctx ends (the member is no
// longer served).
func (s *Server) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.clusters[name]; ok && old.cluster == cl {
		return nil
	}
	cs := &clusterServer{name: name, cluster: cl}
	s.clusters[name] = cs
	go s.serve(ctx, cs)
	return nil
}

// serve checks discovery of cs's cluster (registered in s.clusters) until
// ctx ends, starting and stopping the Controller on it as the CRD comes and
// goes; it stops the Controller on return.
func (s *Server) serve(ctx context.Context, cs *clusterServer) {
	log := ctrl.Log.WithName("spoke").WithValues("provisioningClass", imperatorv1alpha1.CapacityHoldProvisioningClass)
	if cs.name != "" {
		log = log.WithValues("member", cs.name)
	}
	first := true
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		s.check(ctx, log, cs, first)
		first = false
	}, s.interval)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs.running != nil {
		cs.running.cancel()
		if err := <-cs.running.done; err != nil {
			log.Error(err, "The ProvisioningRequest controller ended with an error")
		}
		cs.running = nil
	}
	if s.clusters[cs.name] == cs {
		delete(s.clusters, cs.name)
	}
}

// check starts or stops the Controller on cs as discovery says; first logs
// that the CRD is missing at the start.
func (s *Server) check(ctx context.Context, log logr.Logger, cs *clusterServer, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs.running != nil {
		select {
		case err := <-cs.running.done:
			// Ended on its own (its caches did not sync): start again.
			log.Error(err, "The ProvisioningRequest controller stopped; starting it again")
			cs.running = nil
		default:
		}
	}
	served, err := s.served(cs.cluster.GetConfig())
	if err != nil {
		// Not an answer: keep things as they are.
		log.Error(err, "Checking whether the API server serves ProvisioningRequests")
		return
	}
	if served || cs.running == nil {
		cs.absent = 0
	} else if cs.absent++; cs.absent < goneAfter {
		log.Info("The API server says it does not serve ProvisioningRequests; asking again before releasing their holds", "answers", cs.absent, "needed", goneAfter)
		return
	}
	switch {
	case served && cs.running == nil:
		running, err := s.start(ctx, cs)
		if err != nil {
			log.Error(err, "Starting the ProvisioningRequest controller")
			return
		}
		cs.running = running
		log.Info("Serving ProvisioningRequests")
	case !served && cs.running != nil:
		cs.absent = 0
		cs.running.cancel()
		if err := <-cs.running.done; err != nil {
			log.Error(err, "The ProvisioningRequest controller ended with an error")
		}
		cs.running = nil
		errs := []error{cs.cluster.GetCache().RemoveInformer(ctx, &ProvisioningRequest{}), s.releaseAll(ctx, cs.cluster.GetClient())}
		if err := errors.Join(errs...); err != nil {
			log.Error(err, "Stopping the ProvisioningRequest controller")
		}
		log.Info("Stopped serving ProvisioningRequests: the API server no longer serves autoscaling.x-k8s.io/v1 provisioningrequests (the CRD was removed)")
	case !served && first:
		log.Info("Not serving ProvisioningRequests: the API server does not serve autoscaling.x-k8s.io/v1 provisioningrequests; the agent looks again regularly (install the CRD)",
			"every", s.interval)
	}
}

// start builds the Controller on cs's cache and starts it under a context
// of its own.
func (s *Server) start(ctx context.Context, cs *clusterServer) (*run, error) {
	local := s.mgr.GetLocalManager()
	copts := controller.TypedOptions[mcreconcile.Request]{Reconciler: s.r, SkipNameValidation: ptr.To(true),
		Logger: local.GetLogger().WithValues("controller", "provisioningrequest")}
	if cs.name != "" {
		copts.Logger = copts.Logger.WithValues("member", cs.name)
	}
	copts.DefaultFromConfig(local.GetControllerOptions())
	c, err := controller.NewTypedUnmanaged("provisioningrequest", copts)
	if err != nil {
		return nil, fmt.Errorf("creating the provisioning request controller: %w", err)
	}
	cc := cs.cluster.GetCache()
	err = errors.Join(
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&ProvisioningRequest{}), handler.TypedEnqueueRequestsFromMapFunc(inCluster(cs.name, itself)),
			predicate.NewTypedPredicateFuncs(ofOurClass))),
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&imperatorv1alpha1.CapacityHold{}), handler.TypedEnqueueRequestsFromMapFunc(inCluster(cs.name, holdToRequest)))),
		c.Watch(source.TypedKind[client.Object](cc, client.Object(&corev1.Pod{}), handler.TypedEnqueueRequestsFromMapFunc(inCluster(cs.name, consumerToRequest)))))
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
func (s *Server) releaseAll(ctx context.Context, c client.Client) error {
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

// inCluster makes a mapping's requests requests of the cluster name.
func inCluster(name multicluster.ClusterName, f func(context.Context, client.Object) []reconcile.Request) handler.TypedMapFunc[client.Object, mcreconcile.Request] {
	return func(ctx context.Context, obj client.Object) []mcreconcile.Request {
		in := f(ctx, obj)
		if len(in) == 0 {
			return nil
		}
		out := make([]mcreconcile.Request, len(in))
		for i, r := range in {
			out[i] = mcreconcile.Request{Request: r, ClusterName: name}
		}
		return out
	}
}

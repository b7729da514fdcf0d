package migrate

// What the preflight reads (cluster-wide: the original's Deployment and
// reservations may live in any namespace) and what adoption writes: the
// progress annotation on the Machine, the original's pools (finalizer,
// deletion), and its reservation StatefulSets and Services in the agent's
// namespace (scale, owner, deletion).
//
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=list
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=list
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=list;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machinenodepools,verbs=list;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=apps,namespace=imperator-system,resources=statefulsets,verbs=get;list;patch;delete
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=services,verbs=list;patch;delete

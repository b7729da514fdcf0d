// Package podinjector is the spoke agent's Pod Resource Injector: a mutating
// admission webhook that turns a guest pod (labelled pod-role=guest with a
// machine group and type) into a pod of that machine type. The target
// container gets requests = limits = the type's cpu, memory and GPUs, merged
// with what it already sets; the pod tolerates the type's and the node pool's
// NoSchedule taints; every required node selector term is narrowed to the
// type's ready nodes (and GPU Feature Discovery selectors); and an annotation
// records what was injected. Every guest it admits is held at the
// imperator.tenzen-y.io/slot scheduling gate, which only the agent's Machine
// controller removes, granting units in arrival order (the order of the
// imperator.tenzen-y.io/admitted-at annotation the handler stamps). Pods
// whose labels, container, affinity or spec.nodeName make that impossible
// are denied with a message saying why.
//
// Inject is the pure mutation; Handler serves it over admission, reading
// Machines from the manager's cache; MutatingWebhookConfiguration is the
// registration that limits it to guest pods in injection-enabled namespaces.
package podinjector

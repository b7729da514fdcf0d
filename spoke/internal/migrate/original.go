package migrate

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
)

// What the original Imperator (github.com/tenzen-y/imperator at d70016e)
// creates, as its code names it. Each constant says the file it comes from.
const (
	// OriginalNodePoolFinalizer is the finalizer the original's
	// MachineNodePool controller puts on every pool
	// (pkg/consts/const.go MachineNodePoolFinalizer, added in
	// pkg/controllers/machinenodepool_controller.go).
	OriginalNodePoolFinalizer = "imperator-machinenodepool-finalizer"

	// originalDeploymentName, originalAppLabel and originalBinary identify
	// the original's controller Deployment (deploy/imperator.yaml,
	// config/manager/manager.yaml: Deployment imperator-controller in
	// imperator-system, label app.kubernetes.io/name=imperator, command
	// /imperator-controller, image ghcr.io/tenzen-y/imperator/imperator-controller).
	originalDeploymentName = "imperator-controller"
	originalNamespace      = "imperator-system"
	originalAppLabel       = "imperator"
	originalBinary         = "/imperator-controller"
	originalImage          = "tenzen-y/imperator/imperator-controller"

	// The webhook names of the original's configurations
	// (config/webhook/manifests.yaml; deploy/imperator.yaml names the
	// configurations imperator-mutating-webhook-configuration and
	// imperator-validating-webhook-configuration). Names of webhooks, not
	// of configurations: kustomize prefixes the latter.
	originalPodMutator       = "mutator.pod.imperator.tenzen-y.io"
	originalMachineDefaulter = "defaulter.machine.imperator.tenzen-y.io"
	originalMachineValidator = "validator.machine.imperator.tenzen-y.io"
)

// OriginalReservationName is the name the original gives a machine type's
// reservation StatefulSet and Service: <machine-group>-<machine-type>
// (pkg/controllers/util/name.go GenerateReservationResourceName), the
// reverse of the agent's <machine-type>-<machine-group>.
func OriginalReservationName(machineGroup, machineType string) string {
	return machineGroup + "-" + machineType
}

// OriginalNodePoolName is the name the original gives a Machine's
// MachineNodePool: <machine-group>-node-pool, from the Machine's
// machine-group label (pkg/controllers/util/name.go
// GenerateMachineNodePoolName), where the agent uses the Machine's name.
func OriginalNodePoolName(machineGroup string) string { return machineGroup + "-node-pool" }

// isOriginalDeployment tells the original's controller Deployment by its
// binary or image, or by its name and label when both were changed.
func isOriginalDeployment(d *appsv1.Deployment) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		if strings.Contains(c.Image, originalImage) {
			return true
		}
		if len(c.Command) > 0 && c.Command[0] == originalBinary {
			return true
		}
	}
	return d.Name == originalDeploymentName && d.Labels["app.kubernetes.io/name"] == originalAppLabel
}

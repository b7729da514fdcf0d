package podinjector

import (
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
)

// typeContract is what a machine type asks of its guests (package
// machinetype): the node requirements, the tolerations and one unit's
// resources with their names sorted, and how the names and quantities are
// spelled in a JSON patch. A contract may be shared between admissions:
// nothing modifies it.
type typeContract struct {
	placement     []corev1.NodeSelectorRequirement
	tolerations   []corev1.Toleration
	resources     corev1.ResourceList
	resourceNames []corev1.ResourceName
	// resourcePointers[i] is resourceNames[i] as a JSON pointer token and
	// resourceValues[i] its quantity as the patch carries it.
	resourcePointers []string
	resourceValues   []any
	// firstContainerPaths are the JSON pointers of the quantities in the
	// first container's requests and limits, where most guests are
	// injected: built once, not per admission.
	firstContainerPaths struct{ requests, limits []string }
}

// resourcePaths returns the JSON pointers of the contract's quantities in
// list (requests or limits) of the container at path.
func (c *typeContract) resourcePaths(path string) []string {
	switch path {
	case firstContainerResources + "/requests":
		return c.firstContainerPaths.requests
	case firstContainerResources + "/limits":
		return c.firstContainerPaths.limits
	}
	return c.pathsUnder(path)
}

// pathsUnder returns the JSON pointers of the contract's quantities in the
// resource list at path.
func (c *typeContract) pathsUnder(path string) []string {
	paths := make([]string, len(c.resourcePointers))
	for i, pointer := range c.resourcePointers {
		paths[i] = path + "/" + pointer
	}
	return paths
}

func newTypeContract(group string, machineType *imperatorv1alpha1.MachineType) *typeContract {
	resources := machinetype.Resources(machineType.Spec)
	contract := &typeContract{
		placement:     machinetype.Placement(group, machineType),
		tolerations:   machinetype.Tolerations(group, machineType.Name),
		resources:     resources,
		resourceNames: slices.Sorted(maps.Keys(resources)),
	}
	for _, name := range contract.resourceNames {
		quantity := resources[name]
		contract.resourcePointers = append(contract.resourcePointers, escapePointer(string(name)))
		contract.resourceValues = append(contract.resourceValues, quantity.String())
	}
	contract.firstContainerPaths.requests = contract.pathsUnder(firstContainerResources + "/requests")
	contract.firstContainerPaths.limits = contract.pathsUnder(firstContainerResources + "/limits")
	return contract
}

// contractKey names one machine type of one version of a Machine: a
// Machine's resourceVersion changes with every change of its spec or labels
// (the group), and a Machine deleted and created again under its name gets a
// new one, so a contract is never used after the type changed.
type contractKey struct {
	machine         string
	resourceVersion string
	machineType     string
}

// maxContracts bounds the cache: it is emptied when full, which only costs
// the next admissions their contract's computation.
const maxContracts = 512

// contractCache keeps the contracts of the machine types guests were
// admitted to. A nil cache computes every contract.
type contractCache struct {
	mu        sync.RWMutex
	contracts map[contractKey]*typeContract
}

// of returns the contract of machineType, one of machine's types, in group.
func (c *contractCache) of(machine *imperatorv1alpha1.Machine, group string, machineType *imperatorv1alpha1.MachineType) *typeContract {
	if c == nil || machine.ResourceVersion == "" {
		return newTypeContract(group, machineType)
	}
	key := contractKey{machine: machine.Name, resourceVersion: machine.ResourceVersion, machineType: machineType.Name}
	c.mu.RLock()
	contract, ok := c.contracts[key]
	c.mu.RUnlock()
	if ok {
		return contract
	}
	contract = newTypeContract(group, machineType)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.contracts == nil || len(c.contracts) >= maxContracts {
		c.contracts = make(map[contractKey]*typeContract)
	}
	c.contracts[key] = contract
	return contract
}

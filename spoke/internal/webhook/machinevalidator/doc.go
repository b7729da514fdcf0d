// Package machinevalidator is the spoke agent's validating admission webhook
// for Machines. It checks what the CRD's OpenAPI schema and CEL rules cannot:
// the machine-group label (required, a DNS-1123 label, immutable — CRD rules
// cannot see metadata.labels), that no other Machine uses the same group,
// that a node is in at most one Machine (docs/contract.md, Names), that cpu
// and memory are positive, and that the names built from a machine type and
// the group are valid object names. It re-checks that every nodePool entry
// names exactly one existing machine type, consistently with the CRD's rule.
// Unknown node names are allowed: the node may join later.
//
// Validator reads other Machines from the manager's cache, through an index of
// Machines by node name; ValidatingWebhookConfiguration is its registration.
package machinevalidator

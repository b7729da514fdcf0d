// Package capacityhold owns the rules of CapacityHolds on the spoke: which
// guest claims which hold (ClaimOf, Claims, Allows), in what order holds are
// decided (Order), the pure accounting of one machine type's units between
// holds, their guests and everyone else (PlanType), the status a hold gets
// from it (Apply, Write), and a small controller for what no Machine
// decides: holds of a type nobody offers, and deleting ended holds.
//
// Who decides. A hold takes units out of the free units of one machine type,
// and so does every guest the queue lets through: two writers deciding on
// the same units would race. So the Machine controller (package machine)
// decides everything about holds: in each reconcile of a Machine it lists
// the holds of the Machine's group, and per machine type it runs PlanType
// over the type's figures, its guests and its holds, ordered by creation
// timestamp then UID. Holds not decided yet are decided there, one after the
// other, each seeing the units the ones before it took; the decision, held
// and claimed are written to the hold's status (with the resourceVersion it
// was read at, so a decision made on a stale hold is refused and made again)
// before any guest is let through. The decision is final: Accepted with
// Provisioned, or Failed with the numbers. Everything else — held, claimed,
// CapacityRevoked, BookingExpired — is recomputed in every reconcile from
// the hold's spec and status and the pods, so an agent that restarts, or a
// new leader, carries on with the same holds: nothing lives in memory. The
// Machine controller requeues itself at the earliest validUntil.
//
// The Controller of this package answers holds that no Machine decides: no
// Machine of the group offers the type. It waits a short grace after a
// hold's creation (a Machine created at the same moment may not be in the
// cache yet), then marks it Failed with MachineTypeNotFound. It also deletes
// the holds whose booking ended, Failed or Expired, once the agent's
// --hold-retention (DefaultRetention) has passed since they ended, so that
// finished holds do not pile up and their names are free again; it comes
// back for each hold at that moment (DeleteAt). Released holds need no
// clean-up: releasing a hold is deleting it.
//
// The accounting (PlanType), per machine type of available units:
//   - A guest claims a hold when it carries the hold's UID in the annotation
//     imperator.tenzen-y.io/hold-uid (ClaimOf, Claims). The Pod Resource
//     Injector stamps it when it admits the guest, only if the hold the guest
//     names (label imperator.tenzen-y.io/hold, or a ProvisioningRequest
//     consumer: autoscaling.x-k8s.io/consume-provisioning-request with the
//     class imperator.tenzen-y.io/capacity-hold) exists then, is
//     of the guest's group and type and allows its namespace; it removes any
//     value a user set, and only the agent may change it afterwards. A hold's
//     name is no secret, so the name alone claims nothing: guests that quote
//     it without the UID, among them every guest created before the hold or
//     before a hold of the same name was created again, are ordinary guests.
//     The hold must also be active, of the type, and allow the guest's
//     namespace. Other guests are ordinary guests of the queue, including
//     those that carry the UID of a hold that failed, expired or is gone.
//   - An active hold of count units holds count units until validUntil:
//     claimed of them are held by its guests (bound, let through the gate,
//     or leaving), and the others (held) are reservation pods kept in place.
//     A claimed unit whose guest leaves before validUntil is held again.
//     Guests beyond count that claim the hold are ordinary guests.
//   - Ordinary guests get at most available − units held by guests − units
//     of active holds not claimed; with an active hold, reservation pods that
//     hold no usable unit (on a node that is not node-pool=ready, or that
//     cannot be scheduled) come off that first, so that ordinary guests never
//     take the units that back a hold. Without an active hold the queue works
//     as it does in a cluster without holds (docs/contract.md).
//   - A hold is made only from units nobody else is owed: free = available −
//     lost reservation pods − units held by guests − units of earlier active
//     holds not claimed − queued ordinary guests; while some reservation
//     pods are lost, at most the usable reservation pods (those that exist
//     and are not lost: on a node-pool=ready node, or not placed yet and
//     not unschedulable) less the units of earlier active holds. Queued
//     guests arrived first, so a hold never jumps ahead of them. It needs
//     count − (its guests, by UID, already holding units) of them, all or
//     nothing.
//   - When lost reservation pods leave fewer units than guests and holds
//     hold, or fewer usable reservation pods than the holds hold, the
//     newest holds lose held units first: their held shrinks and
//     CapacityRevoked is True, naming the nodes. So a hold is revoked when
//     every node of its type is in maintenance, whatever available says:
//     available may promise more units than any node has. Reservation pods
//     the StatefulSet has not created yet are not lost (a claimed unit just
//     given back, a new Machine): revoking for them would flap a hold at
//     every handover. The units come back, and CapacityRevoked turns False,
//     when the nodes are ready again.
//   - At validUntil the held units go back to everyone and BookingExpired is
//     True; claimed units stay with their guests until they finish.
//     Deleting a hold returns its held units at once (no finalizer: the
//     Machine controller watches holds); its guests keep their units, as
//     ordinary guests holding them, so deleting an ended hold moves nothing.
package capacityhold

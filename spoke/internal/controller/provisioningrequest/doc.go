// Package provisioningrequest makes the spoke agent a ProvisioningRequest
// provider (autoscaling.x-k8s.io/v1, Cluster Autoscaler's API, which Kueue's
// ProvisioningRequest admission check speaks): it serves the requests of the
// class capacity-hold.imperator.tenzen-y.io with CapacityHolds, and nothing
// else. It owns the mapping of a request's pod sets to machine types
// (Bookings), the names and labels of the holds it makes (HoldName), and the
// request's conditions, which it derives from those holds.
//
// Mapping. Each pod set (a PodTemplate and a count) asks for a machine type
// by the template's imperator.tenzen-y.io/machine-group and machine-type
// labels, the guest labels the pods will carry. Pod sets of one type add
// up: one hold per type. A pod set without those labels, or of a type no
// Machine offers, fails the request with a message naming the pod set. The
// template must also state the type's resources on its target container
// (requests, or limits alone): Kueue counts a Workload's quota from the
// template, before the pod injector gives a pod its unit, so a template
// that relies on injection would look free to Kueue's quota (see
// docs/kueue.md). A mismatch fails the request, naming the container and
// the resource.
//
// Who may book. A request of a namespace not opted in to guest injection
// (OptedIn) is refused: the injector never stamps its pods with a hold's
// UID, so its units would be held for nobody. With a cap
// (Options.MaxUnitsPerNamespace), a request that would take the units its
// namespace's live requests hold above the cap is refused (WithinCap).
//
// Holds. For a request accepted and not provisioned yet, the Controller
// creates one CapacityHold per type, named HoldName(namespace, request,
// group, type), for the request's namespace only, labelled with the
// request's namespace, name and UID, valid for BookingDuration. The
// CapacityHold decides (package capacityhold): the request is Provisioned
// once every hold is, Failed (reason and message of the failed hold; the
// other holds are released) when one fails, BookingExpired when a hold's
// booking expired or a provisioned hold is gone, CapacityRevoked while a
// hold has lost units for RevokedGrace (Kueue ends an admitted Workload on
// CapacityRevoked, so a node out of the pool for a moment must not say it). Failed and BookingExpired are final, as in Cluster
// Autoscaler. Once the pods claimed every unit of a hold, its booking is
// consumed: the Controller moves its validUntil to now, so that the units
// go back to everyone when the pods finish instead of being held again for
// the rest of the booking (the request then says BookingExpired, which
// Kueue ignores for an admitted Workload). Pods Kueue admits carry the consume-provisioning-request and
// provisioning-class-name annotations; the pod injector resolves them to
// HoldName and stamps the hold's UID, which alone claims it.
//
// Release. A CapacityHold is cluster-scoped and cannot be owned by a
// namespaced request, so the Controller watches both: a hold whose request
// is gone, or is another request of the same name (UID label), is deleted,
// which returns its held units at once. The agent serves the class while
// the ProvisioningRequest CRD is served (Server: it asks discovery
// regularly, so a CRD installed after the agent started needs no restart,
// and one removed stops the Controller and releases the holds).
package provisioningrequest

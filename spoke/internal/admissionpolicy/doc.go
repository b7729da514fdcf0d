// Package admissionpolicy writes the bindings of the in-API-server guest
// injection (deploy/spoke/policy/injection) from the Machines: one
// MutatingAdmissionPolicyBinding of imperator-guest-injection per Machine,
// its parameter that Machine and its object selector the Machine's group,
// so the API server evaluates the injection once per guest, for its own
// Machine only, however many Machines there are; and the binding of the
// imperator-guest-unknown-group ValidatingAdmissionPolicy, whose object
// selector lists the groups the Machines carry, so that a guest of any
// other group is refused even when it was created with a copied injection
// record (a policy evaluates one parameter at a time and cannot tell that
// none matched; the agent can); and the binding of the
// imperator-guest-ambiguous-group policy, which refuses the guests of a
// group several Machines carry, as the webhook does. Reconciler applies
// them by server-side apply whenever a Machine changes and deletes the
// bindings of Machines gone; InjectionBindings, Binding and
// AmbiguousGroupBinding are the pure computations. FirstSight stamps the
// arrival order the policy cannot (CEL has no clock) and the UID of the
// hold a guest claims (HoldClaim: CEL cannot read the hold).
package admissionpolicy

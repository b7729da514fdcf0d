package ingest

import (
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// SnapshotPath and DeltaPath are the roots of the field paths refusals name.
var (
	SnapshotPath = field.NewPath("snapshot")
	DeltaPath    = field.NewPath("delta")
)

// The validators below walk a message with a fieldPath, which becomes a
// *field.Path only when a problem is reported: building the path of every
// field checked would cost a third of the hub's CPU per Delta, and nearly
// every message is valid.
var (
	snapshotRoot = fieldPath{}.Child("snapshot")
	deltaRoot    = fieldPath{}.Child("delta")
)

// ValidateSnapshot checks snap on its own and against the per-cluster caps.
func ValidateSnapshot(snap *federationv1.Snapshot, l Limits) error {
	var errs errorList
	machines := snap.GetMachines()
	if len(machines) > l.MaxMachines {
		// Refused before looking further: a cap, not a list to walk.
		errs.add(field.TooMany(snapshotRoot.Child("machines").Path(), len(machines), l.MaxMachines))
		return errs.err()
	}
	validateTimestamp(&errs, snapshotRoot.Child("observedAt"), snap.GetObservedAt())
	var totals Totals
	seen := make(map[string]int, len(machines))
	path := snapshotRoot.Child("machines")
	for i, m := range machines {
		if errs.full() {
			break
		}
		validateMachine(&errs, path.Index(i), m, l)
		if j, dup := seen[m.GetName()]; dup && len(m.GetName()) <= validation.DNS1123SubdomainMaxLength {
			errs.add(field.Duplicate(path.Index(i).Child("name").Path(), fmt.Sprintf("%s (also machines[%d])", m.GetName(), j)))
		}
		seen[m.GetName()] = i
		totals.Add(m)
	}
	if err := errs.err(); err != nil {
		return err
	}
	return totals.Check(SnapshotPath, l)
}

// ValidateDelta checks delta on its own: its upserts and removals. The caps
// apply to the inventory it results in (Totals.Check).
func ValidateDelta(delta *federationv1.Delta, l Limits) error {
	var errs errorList
	upserts, removals := delta.GetUpserts(), delta.GetRemovals()
	if len(upserts) > l.MaxMachines {
		errs.add(field.TooMany(deltaRoot.Child("upserts").Path(), len(upserts), l.MaxMachines))
	}
	if len(removals) > l.MaxMachines {
		errs.add(field.TooMany(deltaRoot.Child("removals").Path(), len(removals), l.MaxMachines))
	}
	if err := errs.err(); err != nil {
		return err
	}
	validateTimestamp(&errs, deltaRoot.Child("observedAt"), delta.GetObservedAt())
	upserted := make(map[string]int, len(upserts))
	path := deltaRoot.Child("upserts")
	for i, m := range upserts {
		if errs.full() {
			break
		}
		validateMachine(&errs, path.Index(i), m, l)
		if j, dup := upserted[m.GetName()]; dup && len(m.GetName()) <= validation.DNS1123SubdomainMaxLength {
			errs.add(field.Duplicate(path.Index(i).Child("name").Path(), fmt.Sprintf("%s (also upserts[%d])", m.GetName(), j)))
		}
		upserted[m.GetName()] = i
	}
	path = deltaRoot.Child("removals")
	for i, name := range removals {
		if errs.full() {
			break
		}
		validateName(&errs, path.Index(i), name, validation.DNS1123SubdomainMaxLength, validation.IsDNS1123Subdomain)
		if j, both := upserted[name]; both && len(name) <= validation.DNS1123SubdomainMaxLength {
			errs.add(field.Invalid(path.Index(i).Path(), name, fmt.Sprintf("is also upserts[%d]: a Delta either changes or removes a Machine", j)))
		}
	}
	return errs.err()
}

// ValidateHello checks what a Hello carries into the store.
func ValidateHello(hello *federationv1.Hello) error {
	var errs errorList
	if v := hello.GetAgentVersion(); len(v) > MaxAgentVersionLength {
		errs.add(field.TooLong(field.NewPath("hello", "agentVersion"), "", MaxAgentVersionLength))
	} else if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		errs.add(field.Invalid(field.NewPath("hello", "agentVersion"), v, "must not contain control characters: it is shown to people"))
	}
	return errs.err()
}

func validateTimestamp(errs *errorList, path fieldPath, ts *timestamppb.Timestamp) {
	if ts == nil {
		return
	}
	// Out of the years 0001–9999 a time cannot be written to the API.
	if err := ts.CheckValid(); err != nil {
		errs.add(field.Invalid(path.Path(), ts.String(), err.Error()))
	}
}

// validateName checks a name with check, whose names are at most maxLength
// long; a longer one is refused without echoing it.
func validateName(errs *errorList, path fieldPath, name string, maxLength int, check func(string) []string) {
	switch {
	case name == "":
		errs.add(field.Required(path.Path(), ""))
		return
	case len(name) > maxLength:
		errs.add(field.TooLong(path.Path(), "", maxLength))
		return
	}
	for _, msg := range check(name) {
		errs.add(field.Invalid(path.Path(), name, msg))
	}
}

func validateMachine(errs *errorList, path fieldPath, m *federationv1.Machine, l Limits) {
	if m == nil {
		errs.add(field.Required(path.Path(), ""))
		return
	}
	// Machines are cluster-scoped objects.
	validateName(errs, path.Child("name"), m.GetName(), validation.DNS1123SubdomainMaxLength, validation.IsDNS1123Subdomain)
	if g := m.GetGroup(); g != "" {
		// The machine-group label is a DNS-1123 label (the Machine validator).
		validateName(errs, path.Child("group"), g, validation.DNS1123LabelMaxLength, validation.IsDNS1123Label)
	}
	nonNegative(errs, path.Child("objectGeneration"), m.GetObjectGeneration())
	nonNegative(errs, path.Child("observedGeneration"), m.GetObservedGeneration())
	if _, known := federationv1.ConditionStatus_name[int32(m.GetReady())]; !known {
		errs.add(field.NotSupported(path.Child("ready").Path(), int32(m.GetReady()), conditionStatusNames))
	}

	types := m.GetTypes()
	if len(types) > l.MaxTypesPerMachine {
		errs.add(field.TooMany(path.Child("types").Path(), len(types), l.MaxTypesPerMachine))
		return
	}
	typeNames := make(map[string]int, len(types))
	for i, t := range types {
		tp := path.Child("types").Index(i)
		validateType(errs, tp, t)
		if j, dup := typeNames[t.GetName()]; dup && len(t.GetName()) <= validation.DNS1123LabelMaxLength {
			errs.add(field.Duplicate(tp.Child("name").Path(), fmt.Sprintf("%s (also types[%d])", t.GetName(), j)))
		}
		typeNames[t.GetName()] = i
	}

	nodes := m.GetNodes()
	if len(nodes) > l.MaxNodesPerMachine {
		errs.add(field.TooMany(path.Child("nodes").Path(), len(nodes), l.MaxNodesPerMachine))
		return
	}
	nodeNames := make(map[string]int, len(nodes))
	for i, n := range nodes {
		np := path.Child("nodes").Index(i)
		if n == nil {
			errs.add(field.Required(np.Path(), ""))
			continue
		}
		validateName(errs, np.Child("name"), n.GetName(), validation.DNS1123SubdomainMaxLength, validation.IsDNS1123Subdomain)
		if j, dup := nodeNames[n.GetName()]; dup && len(n.GetName()) <= validation.DNS1123SubdomainMaxLength {
			errs.add(field.Duplicate(np.Child("name").Path(), fmt.Sprintf("%s (also nodes[%d])", n.GetName(), j)))
		}
		nodeNames[n.GetName()] = i
		if mt := n.GetMachineType(); mt != "" {
			validateName(errs, np.Child("machineType"), mt, validation.DNS1123LabelMaxLength, validation.IsDNS1123Label)
		}
		if c := n.GetCondition(); c == federationv1.NodeCondition_NODE_CONDITION_UNSPECIFIED || federationv1.NodeCondition_name[int32(c)] == "" {
			errs.add(field.NotSupported(np.Child("condition").Path(), int32(c), nodeConditionNames))
		}
	}
}

func validateType(errs *errorList, path fieldPath, t *federationv1.MachineType) {
	if t == nil {
		errs.add(field.Required(path.Path(), ""))
		return
	}
	validateName(errs, path.Child("name"), t.GetName(), validation.DNS1123LabelMaxLength, validation.IsDNS1123Label)
	positiveQuantity(errs, path.Child("cpu"), t.GetCpu())
	positiveQuantity(errs, path.Child("memory"), t.GetMemory())
	if g := t.GetGpu(); g != nil {
		gp := path.Child("gpu")
		switch typ := g.GetType(); {
		case typ == "":
			errs.add(field.Required(gp.Child("type").Path(), ""))
		case len(typ) > maxResourceNameLength:
			errs.add(field.TooLong(gp.Child("type").Path(), "", maxResourceNameLength))
		}
		if g.GetNum() < 1 {
			errs.add(field.Invalid(gp.Child("num").Path(), g.GetNum(), "must be at least 1"))
		}
		for _, selector := range []struct{ name, value string }{{"product", g.GetProduct()}, {"family", g.GetFamily()}, {"machine", g.GetMachine()}} {
			if len(selector.value) > maxGPUSelectorLength {
				errs.add(field.TooLong(gp.Child(selector.name).Path(), "", maxGPUSelectorLength))
			}
		}
	}
	nonNegative(errs, path.Child("available"), t.GetAvailable())
	if u := t.GetUsage(); u != nil {
		up := path.Child("usage")
		nonNegative(errs, up.Child("maximum"), u.GetMaximum())
		nonNegative(errs, up.Child("reserved"), u.GetReserved())
		nonNegative(errs, up.Child("used"), u.GetUsed())
		nonNegative(errs, up.Child("waiting"), u.GetWaiting())
		nonNegative(errs, up.Child("queued"), u.GetQueued())
		// Queued guests are waiting guests held at the agent's slot gate: a
		// report with more queued than waiting would make free count slots
		// those guests are about to take.
		if u.GetQueued() > u.GetWaiting() && u.GetWaiting() >= 0 {
			errs.add(field.Invalid(up.Child("queued").Path(), u.GetQueued(), fmt.Sprintf("must not exceed usage.waiting (%d): queued guests are part of waiting", u.GetWaiting())))
		}
		// Unplaceable guests are queued guests no node can take: free counts
		// their units, so more of them than queued would offer units that
		// queued guests are about to take.
		nonNegative(errs, up.Child("unplaceable"), u.GetUnplaceable())
		if u.GetUnplaceable() > u.GetQueued() && u.GetQueued() >= 0 {
			errs.add(field.Invalid(up.Child("unplaceable").Path(), u.GetUnplaceable(), fmt.Sprintf("must not exceed usage.queued (%d): unplaceable guests are part of queued", u.GetQueued())))
		}
		// Held units are reserved slots set aside for capacity holds.
		nonNegative(errs, up.Child("held"), u.GetHeld())
		if u.GetHeld() > u.GetMaximum() && u.GetMaximum() >= 0 {
			errs.add(field.Invalid(up.Child("held").Path(), u.GetHeld(), fmt.Sprintf("must not exceed usage.maximum (%d): held units are units of the type", u.GetMaximum())))
		}
	}
	if n := t.GetNodes(); n != nil {
		np := path.Child("nodes")
		nonNegative(errs, np.Child("ready"), n.GetReady())
		nonNegative(errs, np.Child("notReady"), n.GetNotReady())
		nonNegative(errs, np.Child("maintenance"), n.GetMaintenance())
		nonNegative(errs, np.Child("missing"), n.GetMissing())
		nonNegative(errs, np.Child("conflict"), n.GetConflict())
	}
}

func nonNegative[T int32 | int64](errs *errorList, path fieldPath, v T) {
	if v < 0 {
		errs.add(field.Invalid(path.Path(), v, "must not be negative"))
	}
}

// positiveQuantity checks a cpu or memory quantity as the Machine validator
// does: it parses and is positive.
func positiveQuantity(errs *errorList, path fieldPath, s string) {
	switch {
	case s == "":
		errs.add(field.Required(path.Path(), "a Kubernetes quantity, e.g. 40 or 128Gi"))
		return
	case len(s) > maxQuantityLength:
		errs.add(field.TooLong(path.Path(), "", maxQuantityLength))
		return
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		errs.add(field.Invalid(path.Path(), s, err.Error()))
		return
	}
	if q.Sign() <= 0 {
		errs.add(field.Invalid(path.Path(), s, "must be positive"))
	}
}

var (
	conditionStatusNames = enumNames(federationv1.ConditionStatus_name, false)
	nodeConditionNames   = enumNames(federationv1.NodeCondition_name, true)
)

// enumNames lists an enum's values for NotSupported errors, without the
// unspecified zero value when it is not allowed.
func enumNames(names map[int32]string, skipZero bool) []string {
	out := make([]string, 0, len(names))
	for i := range int32(len(names)) {
		if skipZero && i == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%d (%s)", i, names[i]))
	}
	return out
}

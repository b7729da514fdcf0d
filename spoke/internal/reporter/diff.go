package reporter

import (
	"sort"

	"google.golang.org/protobuf/proto"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// diff returns the Machines of current that are new or changed since sent,
// and the names of those of sent that are gone, both sorted by name.
func diff(sent, current map[string]*federationv1.Machine) (upserts []*federationv1.Machine, removals []string) {
	for name, m := range current {
		if old, ok := sent[name]; !ok || !proto.Equal(old, m) {
			upserts = append(upserts, m)
		}
	}
	for name := range sent {
		if _, ok := current[name]; !ok {
			removals = append(removals, name)
		}
	}
	sort.Slice(upserts, func(i, j int) bool { return upserts[i].GetName() < upserts[j].GetName() })
	sort.Strings(removals)
	return upserts, removals
}

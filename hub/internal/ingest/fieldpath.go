package ingest

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// fieldPath is a field path held by value, in a fixed array: passing and
// extending it allocates nothing. Paths deeper than its array (none the
// validators build) keep their first maxPathDepth segments.
type fieldPath struct {
	n   int
	seg [maxPathDepth]pathSegment
}

// maxPathDepth is the depth of the deepest path the validators name, e.g.
// delta.upserts[3].types[0].usage.held: six segments, the indexes included.
const maxPathDepth = 8

// pathSegment is a field name, or an index when name is empty.
type pathSegment struct {
	name  string
	index int
}

// Child is p extended by the field name.
func (p fieldPath) Child(name string) fieldPath { return p.with(pathSegment{name: name}) }

// Index is p extended by the list index i.
func (p fieldPath) Index(i int) fieldPath { return p.with(pathSegment{index: i}) }

func (p fieldPath) with(s pathSegment) fieldPath {
	if p.n < maxPathDepth {
		p.seg[p.n] = s
		p.n++
	}
	return p
}

// Path is p as the API machinery's field path.
func (p fieldPath) Path() *field.Path {
	var path *field.Path
	for _, s := range p.seg[:p.n] {
		switch {
		case s.name == "":
			path = path.Index(s.index)
		case path == nil:
			path = field.NewPath(s.name)
		default:
			path = path.Child(s.name)
		}
	}
	return path
}

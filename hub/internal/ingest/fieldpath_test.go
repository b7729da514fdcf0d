package ingest

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A refusal names its field with the API machinery's spelling; fieldPath
// builds that path only when it is reported, and must build the same one.
func TestFieldPathNamesTheFieldAsTheAPIMachineryDoes(t *testing.T) {
	for _, tc := range []struct {
		got  fieldPath
		want *field.Path
	}{
		{snapshotRoot, field.NewPath("snapshot")},
		{deltaRoot.Child("removals").Index(4), field.NewPath("delta", "removals").Index(4)},
		{
			deltaRoot.Child("upserts").Index(3).Child("types").Index(0).Child("gpu").Child("product"),
			field.NewPath("delta", "upserts").Index(3).Child("types").Index(0).Child("gpu", "product"),
		},
		{
			snapshotRoot.Child("machines").Index(9999).Child("nodes").Index(4999).Child("condition"),
			field.NewPath("snapshot", "machines").Index(9999).Child("nodes").Index(4999).Child("condition"),
		},
	} {
		if got, want := tc.got.Path().String(), tc.want.String(); got != want {
			t.Errorf("fieldPath renders %q, want %q", got, want)
		}
	}
}

// Extending a path is by value: a branch taken for one field does not
// change the path of its sibling.
func TestFieldPathBranchesDoNotShareSegments(t *testing.T) {
	types := deltaRoot.Child("upserts").Index(0).Child("types")
	first, second := types.Index(0).Child("name"), types.Index(1).Child("cpu")
	if got := first.Path().String(); got != "delta.upserts[0].types[0].name" {
		t.Errorf("first = %q", got)
	}
	if got := second.Path().String(); got != "delta.upserts[0].types[1].cpu" {
		t.Errorf("second = %q", got)
	}
}

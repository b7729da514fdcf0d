package configflag

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitListDropsSpacesAndEmptyItems(t *testing.T) {
	cases := map[string][]string{
		"":             nil,
		"a":            {"a"},
		"a, b,,c ":     {"a", "b", "c"},
		" , ,":         nil,
		"10.0.0.1,::1": {"10.0.0.1", "::1"},
	}
	for in, want := range cases {
		if diff := cmp.Diff(want, SplitList(in)); diff != "" {
			t.Errorf("SplitList(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestPodNamespaceFallsBackToTheManifestsNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	if got := PodNamespace(); got != DefaultNamespace {
		t.Errorf("without POD_NAMESPACE: %q, want %q", got, DefaultNamespace)
	}
	t.Setenv("POD_NAMESPACE", "gpu-pools")
	if got := PodNamespace(); got != "gpu-pools" {
		t.Errorf("with POD_NAMESPACE=gpu-pools: %q", got)
	}
}

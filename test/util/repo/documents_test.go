package repo

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitDocuments(t *testing.T) {
	cases := map[string]struct {
		data     string
		wantDocs []string
		wantErr  bool
	}{
		"empty":                            {data: ""},
		"one document":                     {data: "a: 1\n", wantDocs: []string{"a: 1\n"}},
		"a leading separator and comments": {data: "# header\n---\na: 1\n---\n# only a comment\n---\nb: 2\n", wantDocs: []string{"a: 1\n", "b: 2\n"}},
		"a document that is not YAML":      {data: "a: [1\n", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			docs, err := SplitDocuments([]byte(tc.data))
			if (err != nil) != tc.wantErr {
				t.Fatalf("SplitDocuments error = %v, want error: %v", err, tc.wantErr)
			}
			var got []string
			for _, d := range docs {
				got = append(got, strings.TrimPrefix(string(d), "---\n"))
			}
			if diff := cmp.Diff(tc.wantDocs, got); diff != "" {
				t.Errorf("documents (-want +got):\n%s", diff)
			}
		})
	}
}

package v1alpha1_test

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crds reads the generated CustomResourceDefinitions of hub and spoke.
func crds(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob("../../deploy/*/crd/imperator.tenzen-y.io_*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs found (%v): run make generate", err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, crd)
	}
	return out
}

// undocumented lists the fields below path without a description.
func undocumented(path string, s *apiextensionsv1.JSONSchemaProps, out *[]string) {
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prop := s.Properties[name]
		p := path + "." + name
		// apiVersion, kind and metadata are Kubernetes' own.
		if prop.Description == "" && (path != "" || name != "metadata") {
			*out = append(*out, p)
		}
		undocumented(p, &prop, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		undocumented(path+"[]", s.Items.Schema, out)
	}
}

func TestKubectlExplainHasTextForEveryField(t *testing.T) {
	for _, crd := range crds(t) {
		for _, v := range crd.Spec.Versions {
			var missing []string
			if v.Schema.OpenAPIV3Schema.Description == "" {
				missing = append(missing, "(the kind itself)")
			}
			undocumented("", v.Schema.OpenAPIV3Schema, &missing)
			if len(missing) > 0 {
				t.Errorf("%s %s: kubectl explain shows no text for %v: add a doc comment to the Go field", crd.Name, v.Name, missing)
			}
		}
	}
}

func TestKubectlGetImperatorListsEveryKind(t *testing.T) {
	for _, crd := range crds(t) {
		if !slices.Contains(crd.Spec.Names.Categories, "imperator") {
			t.Errorf("%s is not in the imperator category: kubectl get imperator leaves it out", crd.Name)
		}
		if len(crd.Spec.Names.ShortNames) == 0 {
			t.Errorf("%s has no short name", crd.Name)
		}
	}
}

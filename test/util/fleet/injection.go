package fleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/test/util/repo"
)

// InjectionPolicyDir holds the guest injection by admission policy
// (docs/contract.md, "Injection by admission policy"), relative to the
// repository root; its guest-*.yaml are the policies and their fixed
// bindings, as the component deploy/spoke/injection-policy installs them.
var InjectionPolicyDir = filepath.Join("deploy", "spoke", "policy", "injection")

// SetAgentInjection runs the agent of the in-cluster spoke with
// --injection=mode from its next StartAgent on; "" puts it back on the
// agent's default (the webhook). The policies themselves are
// InstallInjectionPolicies'.
func (f *Fleet) SetAgentInjection(spoke, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.injection == nil {
		f.injection = map[string]string{}
	}
	if mode == "" {
		delete(f.injection, spoke)
		return
	}
	f.injection[spoke] = mode
}

// injectionArgsLocked are the flags of spoke's agent for its injection
// path. f.mu is held.
func (f *Fleet) injectionArgsLocked(spoke string) []string {
	if mode, ok := f.injection[spoke]; ok {
		return []string{"--injection=" + mode}
	}
	return nil
}

// InstallInjectionPolicies creates the objects of InjectionPolicyDir in
// the spoke's cluster (those there already are left as they are).
func (f *Fleet) InstallInjectionPolicies(ctx context.Context, spoke string) error {
	c, objs, err := f.injectionPolicies(spoke)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("fleet: creating %s %s in %s: %w", obj.GetKind(), obj.GetName(), spoke, err)
		}
	}
	return nil
}

// UninstallInjectionPolicies deletes the objects of InjectionPolicyDir from
// the spoke's cluster, and the bindings an agent on the policy path wrote
// (docs/contract.md: going back from policy to webhook).
func (f *Fleet) UninstallInjectionPolicies(ctx context.Context, spoke string) error {
	c, objs, err := f.injectionPolicies(spoke)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("fleet: deleting %s %s in %s: %w", obj.GetKind(), obj.GetName(), spoke, err))
		}
	}
	written := &unstructured.Unstructured{}
	written.SetAPIVersion("admissionregistration.k8s.io/v1")
	written.SetKind("MutatingAdmissionPolicyBinding")
	if err := c.DeleteAllOf(ctx, written, client.HasLabels{"imperator.tenzen-y.io/injection-binding"}); err != nil {
		errs = append(errs, fmt.Errorf("fleet: deleting the injection bindings in %s: %w", spoke, err))
	}
	for _, name := range []string{"imperator-guest-unknown-group", "imperator-guest-ambiguous-group"} {
		b := &unstructured.Unstructured{}
		b.SetAPIVersion("admissionregistration.k8s.io/v1")
		b.SetKind("ValidatingAdmissionPolicyBinding")
		b.SetName(name)
		if err := c.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("fleet: deleting ValidatingAdmissionPolicyBinding %s in %s: %w", name, spoke, err))
		}
	}
	return errors.Join(errs...)
}

// AddSpokeNode adds a kwok-simulated node to the spoke's cluster and waits
// until it is Ready; DeleteSpokeNode removes it.
func (f *Fleet) AddSpokeNode(ctx context.Context, spoke string, node *corev1.Node) error {
	c, ok := f.Spokes[spoke]
	if !ok {
		return fmt.Errorf("fleet: no spoke %q", spoke)
	}
	return c.AddNode(ctx, node)
}

// DeleteSpokeNode deletes a node of the spoke's cluster and waits until it
// is gone.
func (f *Fleet) DeleteSpokeNode(ctx context.Context, spoke, name string) error {
	c, ok := f.Spokes[spoke]
	if !ok {
		return fmt.Errorf("fleet: no spoke %q", spoke)
	}
	return c.DeleteNode(ctx, name)
}

// injectionPolicies are a client of the spoke's cluster and the objects of
// InjectionPolicyDir.
func (f *Fleet) injectionPolicies(spoke string) (client.Client, []*unstructured.Unstructured, error) {
	cluster, ok := f.Spokes[spoke]
	if !ok {
		return nil, nil, fmt.Errorf("fleet: no spoke %q", spoke)
	}
	c, err := client.New(cluster.Config, client.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: a client of %s: %w", spoke, err)
	}
	root, err := repo.Root()
	if err != nil {
		return nil, nil, err
	}
	paths, err := filepath.Glob(filepath.Join(root, InjectionPolicyDir, "guest-*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("fleet: no policies in %s", InjectionPolicyDir)
	}
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("fleet: %w", err)
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("fleet: reading %s: %w", path, err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				return nil, nil, fmt.Errorf("fleet: reading %s: %w", path, err)
			}
			if len(obj.Object) > 0 {
				objs = append(objs, obj)
			}
		}
	}
	return c, objs, nil
}

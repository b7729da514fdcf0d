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

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// AdmissionPolicyDir is where deploy/spoke ships its admission policies,
// relative to the repository root: each file one ValidatingAdmissionPolicy
// and its binding.
var AdmissionPolicyDir = filepath.Join("deploy", "spoke", "policy")

// AgentUser is the identity the admission policies know as the agent: the
// ServiceAccount of deploy/spoke and of the Helm chart.
const AgentUser = "system:serviceaccount:imperator-system:imperator-spoke"

// AdmissionPolicy is one file of AdmissionPolicyDir.
type AdmissionPolicy struct {
	File    string
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// AdmissionPolicies reads every file of AdmissionPolicyDir, strictly: a file
// holding anything but one policy and its binding is an error.
func AdmissionPolicies() ([]AdmissionPolicy, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(root, AdmissionPolicyDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	policies := make([]AdmissionPolicy, 0, len(paths))
	for _, path := range paths {
		p, err := readAdmissionPolicy(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		policies = append(policies, p)
	}
	return policies, nil
}

func readAdmissionPolicy(path string) (AdmissionPolicy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return AdmissionPolicy{}, err
	}
	p := AdmissionPolicy{
		File:    filepath.Base(path),
		Policy:  &admissionregistrationv1.ValidatingAdmissionPolicy{},
		Binding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for _, obj := range []any{p.Policy, p.Binding} {
		doc, err := docs.Read()
		if err != nil {
			return AdmissionPolicy{}, err
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return AdmissionPolicy{}, err
		}
	}
	if _, err := docs.Read(); !errors.Is(err, io.EOF) {
		return AdmissionPolicy{}, errors.New("the file holds more than the policy and its binding")
	}
	return p, nil
}

// InstallAdmissionPolicies creates the admission policies deploy/spoke
// ships in c, as `kubectl apply -k deploy/spoke` does: the tenant boundary
// holds on the fleet as on a real cluster. The agent must then act as
// AgentUser (AgentKubeconfig).
func InstallAdmissionPolicies(ctx context.Context, c *harness.Cluster) error {
	policies, err := AdmissionPolicies()
	if err != nil {
		return err
	}
	api := c.Kubernetes().AdmissionregistrationV1()
	for _, p := range policies {
		if _, err := api.ValidatingAdmissionPolicies().Create(ctx, p.Policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicy %s in %s: %w", p.Policy.Name, c.Name, err)
		}
		if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, p.Binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s in %s: %w", p.Binding.Name, c.Name, err)
		}
	}
	return nil
}

// AgentKubeconfig writes, next to c's admin kubeconfig, one that acts as
// AgentUser, and returns its path. The agent of a real cluster is that
// ServiceAccount, the one identity the admission policies let remove the
// slot gate; on the fleet it keeps the admin's rights (the groups
// system:masters), so that only the policies tell it apart from the admin.
// Running under the generated RBAC is test/integration/deploy's job.
func AgentKubeconfig(c *harness.Cluster) (string, error) {
	config, err := clientcmd.LoadFromFile(c.KubeconfigPath)
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig of %s: %w", c.Name, err)
	}
	for _, user := range config.AuthInfos {
		user.Impersonate = AgentUser
		user.ImpersonateGroups = []string{"system:masters", "system:authenticated"}
	}
	path := agentKubeconfigPath(c)
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return "", fmt.Errorf("writing the agent kubeconfig of %s: %w", c.Name, err)
	}
	return path, nil
}

// agentKubeconfigPath is where AgentKubeconfig writes c's agent kubeconfig.
func agentKubeconfigPath(c *harness.Cluster) string {
	return filepath.Join(c.Dir, "agent.kubeconfig")
}

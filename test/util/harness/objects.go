package harness

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Kubernetes returns a typed client with admin rights.
func (c *Cluster) Kubernetes() kubernetes.Interface { return c.kube }

// Kubectl runs the cached kubectl against the cluster and returns its
// combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig=" + c.KubeconfigPath}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// InstallCRDs installs the CRDs found in dirs (files or directories) and waits
// until they are served.
func (c *Cluster) InstallCRDs(ctx context.Context, dirs ...string) error {
	_, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("installing CRDs from %v in %s: %w", dirs, c.Name, err)
	}
	return nil
}

// AddNode creates node as a kwok-simulated node and waits until it is Ready
// and schedulable (the controller-manager has lifted the not-ready taint the
// API server puts on new nodes).
func (c *Cluster) AddNode(ctx context.Context, node *corev1.Node) error {
	node = node.DeepCopy()
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[KwokNodeAnnotation] = "fake"
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels["type"] = "kwok"
	if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s in %s: %w", node.Name, c.Name, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return waitFor(waitCtx, "node "+node.Name+" to become Ready", 100*time.Millisecond, c.processes(), func(ctx context.Context) bool {
		n, err := c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// DeleteNode deletes a node and waits until it is gone.
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	err := c.kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s in %s: %w", name, c.Name, err)
	}
	return nil
}

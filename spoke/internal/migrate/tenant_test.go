package migrate

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/schemes"
)

// lookAlike is a Deployment whose container runs the original's binary.
func lookAlike(namespace string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "anything"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{originalBinary}}}}}}}
}

func TestTenantDeploymentThatLooksLikeTheOriginalDoesNotStopTheAgent(t *testing.T) {
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		namespace string
		blocks    bool
	}{
		{namespace: "tenant-a", blocks: false},
		{namespace: "agent-ns", blocks: true},
		{namespace: originalNamespace, blocks: true},
	} {
		t.Run(tc.namespace, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lookAlike(tc.namespace)).Build()
			err := Startup(context.Background(), c, "agent-ns", logr.Discard())
			if tc.blocks && err == nil {
				t.Fatalf("the original's controller in %s did not stop the start", tc.namespace)
			}
			if !tc.blocks && err != nil {
				t.Fatalf("a look-alike Deployment in the tenant namespace %s stopped the agent's start: %v", tc.namespace, err)
			}
			if tc.blocks && !strings.Contains(err.Error(), tc.namespace+"/anything") {
				t.Fatalf("the refusal %q does not name the Deployment %s/anything", err, tc.namespace)
			}
			report, err := Preflight(context.Background(), c, "agent-ns")
			if err != nil {
				t.Fatal(err)
			}
			if len(report.Findings) != 1 {
				t.Fatalf("findings %+v, want the Deployment reported (blocking or not)", report.Findings)
			}
		})
	}
}

package deploy_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// injectionPolicies are the objects of deploy/spoke/policy/injection.
var injectionPolicies = []string{
	"MutatingAdmissionPolicy/imperator-guest-injection",
	"ValidatingAdmissionPolicy/imperator-guest-injection-refusals",
	"ValidatingAdmissionPolicy/imperator-guest-injection-required",
	"ValidatingAdmissionPolicy/imperator-guest-unknown-group",
	"ValidatingAdmissionPolicy/imperator-guest-ambiguous-group",
}

// injectionShape is what decides the injection path in a rendering: which
// injection policies and webhook registrations it holds, and the agent's
// --injection flag ("" when the agent runs with its default).
func injectionShape(objs []*unstructured.Unstructured) (policies []string, podInjector, machineValidator bool, flag string) {
	GinkgoHelper()
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetName()
		switch key {
		case "MutatingWebhookConfiguration/imperator-pod-injector":
			podInjector = true
		case "ValidatingWebhookConfiguration/imperator-machine-validator":
			machineValidator = true
		case "Deployment/imperator-spoke":
			containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			Expect(err).NotTo(HaveOccurred())
			args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			Expect(err).NotTo(HaveOccurred())
			for _, a := range args {
				if len(a) > len("--injection=") && a[:len("--injection=")] == "--injection=" {
					flag = a[len("--injection="):]
				}
			}
		}
		for _, p := range injectionPolicies {
			if key == p {
				policies = append(policies, key)
			}
		}
	}
	return policies, podInjector, machineValidator, flag
}

var _ = Describe("Injection by admission policy (injection.mode, deploy/spoke/injection-policy)", func() {
	It("installs the injection policies and runs the agent with --injection=policy instead of registering the pod injector's webhook, with kustomize and Helm; the API server takes the policies", func(ctx context.Context) {
		By("the kustomize overlay deploy/overlays/spoke-injection-policy (the base plus the component)")
		objs, err := render(ctx, filepath.Join(root, "deploy", "overlays", "spoke-injection-policy"))
		Expect(err).NotTo(HaveOccurred())
		policies, podInjector, machineValidator, flag := injectionShape(objs)
		Expect(policies).To(ConsistOf(injectionPolicies))
		Expect(podInjector).To(BeFalse(), "the pod injector's webhook would inject a second time, and refuse guests while the agent is down")
		Expect(machineValidator).To(BeTrue(), "the Machine validator stays")
		Expect(flag).To(Equal("policy"))

		By("installing them for real: the API server compiles their CEL")
		_, err = apply(ctx, ofKind(objs, "CustomResourceDefinition", "Namespace"))
		Expect(err).NotTo(HaveOccurred())
		installed := ofKind(objs, "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
		DeferCleanup(func(ctx context.Context) {
			for _, o := range installed {
				_, err := cluster.Kubectl(ctx, "delete", "--ignore-not-found", o.GetKind()+".admissionregistration.k8s.io", o.GetName())
				Expect(err).NotTo(HaveOccurred())
			}
		})
		_, err = apply(ctx, installed)
		Expect(err).NotTo(HaveOccurred())
		for _, p := range injectionPolicies[1:] {
			Eventually(func(g Gomega) {
				out, err := cluster.Kubectl(ctx, "get", "validatingadmissionpolicies.admissionregistration.k8s.io", p[len("ValidatingAdmissionPolicy/"):],
					"-o", "jsonpath={.status.observedGeneration}/{.metadata.generation} {.status.typeChecking.expressionWarnings}")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(Equal("1/1 "), "%s: type checking warnings", p)
			}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		}

		By("the chart with injection.mode policy, which the deploy suite compares with the overlay field by field")
		objs, err = helmTemplate(ctx, "imperator-spoke", "--set", "hub.standalone=true", "--set", "injection.mode=policy")
		Expect(err).NotTo(HaveOccurred())
		policies, podInjector, machineValidator, flag = injectionShape(objs)
		Expect(policies).To(ConsistOf(injectionPolicies))
		Expect(podInjector).To(BeFalse())
		Expect(machineValidator).To(BeTrue())
		Expect(flag).To(Equal("policy"))
	})

	It("keeps the webhook by default, and with auto follows what the API server serves, as the agent does", func(ctx context.Context) {
		cases := map[string]struct {
			args       []string
			wantPolicy bool
			wantFlag   string
		}{
			"default (webhook)": {},
			"auto, the API server serves MutatingAdmissionPolicies (1.36 and later)": {
				args:       []string{"--set", "injection.mode=auto", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"},
				wantPolicy: true, wantFlag: "auto",
			},
			"auto, the API server does not": {args: []string{"--set", "injection.mode=auto"}, wantFlag: "auto"},
		}
		for name, c := range cases {
			objs, err := helmTemplate(ctx, "imperator-spoke", append([]string{"--set", "hub.standalone=true"}, c.args...)...)
			Expect(err).NotTo(HaveOccurred(), name)
			policies, podInjector, _, flag := injectionShape(objs)
			Expect(flag).To(Equal(c.wantFlag), name)
			if c.wantPolicy {
				Expect(policies).To(ConsistOf(injectionPolicies), name)
				Expect(podInjector).To(BeFalse(), name)
			} else {
				Expect(policies).To(BeEmpty(), name)
				Expect(podInjector).To(BeTrue(), name)
			}
		}
	})

	It("refuses an unknown injection.mode and the policy path for a hosted agent, naming injection.mode", func(ctx context.Context) {
		_, err := helmTemplate(ctx, "imperator-spoke", "--set", "hub.standalone=true", "--set", "injection.mode=cel")
		Expect(err).To(MatchError(ContainSubstring("injection")))
		_, err = helmTemplate(ctx, "imperator-spoke", "-f", filepath.Join(chartDir("imperator-spoke"), "ci", "hosted-values.yaml"),
			"--set", "injection.mode=policy")
		Expect(err).To(MatchError(And(ContainSubstring("injection.mode"), ContainSubstring("hosted"))))
	})
})

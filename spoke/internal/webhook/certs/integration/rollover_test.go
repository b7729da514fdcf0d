package certs_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/imperator-federation/imperator/spoke/internal/webhook/certs"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
	"github.com/imperator-federation/imperator/test/util/harness"
)

var _ = Describe("A webhook CA rollover", func() {
	const (
		secretName    = "imperator-webhook-cert"
		configuration = "rollover-test"
		allowPath     = "/allow"
	)

	It("refuses no admission while two replicas serve through several CA rollovers", func(ctx context.Context) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollover-"}}
		Expect(k8s.Create(ctx, ns)).To(Succeed())
		ports, err := harness.FreePorts(2)
		Expect(err).NotTo(HaveOccurred())

		// One webhook per replica, so that every admission reaches both: the
		// one that renewed and the one that has not re-read the Secret yet.
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: configuration}}
		for i, port := range ports {
			cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
				Name:         fmt.Sprintf("replica-%d.rollover.imperator.tenzen-y.io", i),
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + allowPath)},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
					},
				}},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns.Name}},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			})
		}
		Expect(k8s.Create(ctx, cfg)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, cfg))).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: secretName}}))).To(Succeed())
		})

		// A two-minute CA has less than a third of its lifetime left from
		// the start (certificates are backdated five minutes), so every CA
		// rolls over as soon as the last rollover is done: one every few
		// seconds with a one-second check interval (two-second overlap).
		opts := certs.Options{
			Namespace: ns.Name, SecretName: secretName, Hosts: []string{"127.0.0.1"},
			Bundles:    &install.CABundles{Client: k8s, Validating: []string{configuration}},
			CAValidity: 2 * time.Minute, CertValidity: time.Hour, CheckInterval: time.Second,
		}
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		DeferCleanup(func() { stop(); wg.Wait() })
		allow := &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
			return admission.Allowed("")
		})}
		for i, port := range ports {
			m, err := certs.New(k8s, opts)
			Expect(err).NotTo(HaveOccurred())
			Expect(m.Ensure(ctx)).To(Succeed(), "replica %d", i)
			server := webhook.NewServer(webhook.Options{
				Host: "127.0.0.1", Port: port,
				TLSOpts: []func(*tls.Config){m.TLSOption},
			})
			server.Register(allowPath, allow)
			wg.Add(2)
			go func() { defer wg.Done(); _ = server.Start(runCtx) }()
			go func() {
				defer wg.Done()
				// The replicas check out of step, as pods started apart do.
				select {
				case <-time.After(time.Duration(i) * 400 * time.Millisecond):
				case <-runCtx.Done():
					return
				}
				_ = m.Start(runCtx)
			}()
		}

		By("creating ConfigMaps through both replicas' webhooks until the CA has been promoted three times")
		promotions := map[string]bool{}
		var refused []string
		admitted := 0
		deadline := time.Now().Add(45 * time.Second)
		for len(promotions) < 4 && time.Now().Before(deadline) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, GenerateName: "admitted-"}}
			if err := k8s.Create(ctx, cm); err != nil {
				refused = append(refused, err.Error())
			} else {
				admitted++
			}
			secret := &corev1.Secret{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: secretName}, secret)).To(Succeed())
			promotions[string(secret.Data[certs.CACertKey])] = true
			time.Sleep(50 * time.Millisecond)
		}
		GinkgoWriter.Printf("admitted %d ConfigMaps across %d CAs, refused %d\n", admitted, len(promotions), len(refused))
		Expect(promotions).To(HaveLen(4), "the CA was not rolled over three times within the deadline")
		Expect(refused).To(BeEmpty(), "admissions refused during the rollover")
		Expect(admitted).To(BeNumerically(">", 50))
	}, NodeTimeout(2*time.Minute))
})

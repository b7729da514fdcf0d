// Package machinevalidator_test runs the Machine validator behind a real API
// server (envtest): the ValidatingWebhookConfiguration the agent applies sends
// Machine admissions to a controller-runtime manager serving the validator,
// and every expectation is what a user of kubectl would see: the Machine is
// created or refused with a message naming the field.
package machinevalidator_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestMachineValidator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Machine validator")
}

var (
	env *framework.Environment
	k8s client.Client
)

var _ = BeforeSuite(func(ctx context.Context) {
	env = framework.StartSuite(ctx, environment())
	k8s = env.Client
}, NodeTimeout(2*time.Minute))

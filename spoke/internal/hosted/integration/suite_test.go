// Package integration runs hosted mode end to end: one spoke agent binary,
// started with --clusters-from=kubeconfig-secrets against a management
// cluster (envtest), serves three member clusters (harness control planes
// with a scheduler and kwok nodes) whose kubeconfigs it finds in labelled
// Secrets, and reports each of them to an in-process hub (hub/hubtest) under
// its own identity. Each member's API server authenticates to the agent's
// webhooks with the client certificate the agent issues it, through an
// admission configuration as docs/hosted.md tells operators to write
// (fleet.MemberAdmission). Expectations are read from the members' API
// servers and the hub's in-memory view, as users see them.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestHosted(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hosted mode: one agent, many member clusters")
}

const (
	agentNamespace = "imperator-system"
	// membersNamespace holds the members' Secrets: the agent's own
	// namespace, as deploy/overlays/spoke-hosted has it.
	membersNamespace = agentNamespace
	// gracePeriod is longer than the reporters' heartbeat interval (5 s).
	gracePeriod = 8 * time.Second
)

var (
	management     *framework.Environment
	managementKube kubernetes.Interface
	// memberAdmission is each member API server's side of the webhook
	// authentication: where its client Secret is mounted.
	memberAdmission = map[string]*fleet.MemberAdmission{}
	hubEnv          *framework.Environment
	hub             *hubtest.Hub
	members         = map[string]*framework.Environment{}
	agent           *harness.Process
	// webhookURL is where the members' API servers reach the agent.
	webhookURL string
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	root, err := repo.Root()
	Expect(err).NotTo(HaveOccurred())
	binDir, err := repo.Binaries(ctx, GinkgoT().TempDir(), "spoke")
	Expect(err).NotTo(HaveOccurred())

	hubCluster, err := hubtest.ClusterOptions()
	Expect(err).NotTo(HaveOccurred())
	hubEnv, err = framework.Start(ctx, hubCluster)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(hubEnv.Stop)
	caFile, err := hubtest.WriteCAFile(ctx, hubEnv.Client, agentNamespace, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	hub, err = hubtest.Start(hubEnv.Config, hubtest.Options{Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: 300 * time.Millisecond})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(hub.Stop)

	// The management cluster holds only the members' Secrets, the webhook
	// certificate and the leader Lease: no Imperator CRDs.
	management, err = framework.Start(ctx, framework.Options{Namespaces: []string{agentNamespace}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(management.Stop)
	managementKube, err = kubernetes.NewForConfig(management.Config)
	Expect(err).NotTo(HaveOccurred())
	// The agent runs in the management cluster with exactly the Role of
	// deploy/overlays/spoke-hosted, bound to its user.
	Expect(bindHostedRole(ctx, filepath.Join(root, "deploy", "overlays", "spoke-hosted", "role.yaml"), "hosted-agent")).To(Succeed())
	user, err := management.Envtest.AddUser(envtest.User{Name: "hosted-agent"}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	kubeconfigPath := filepath.Join(dir, "management.kubeconfig")
	Expect(os.WriteFile(kubeconfigPath, kubeconfig, 0o600)).To(Succeed())

	// The agent's port is chosen first: the members' API servers name it in
	// the credentials of its webhooks.
	ports, err := harness.FreePorts(2)
	Expect(err).NotTo(HaveOccurred())
	webhookURL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	for _, name := range []string{"alpha", "beta", "gamma"} {
		admission, flags, err := fleet.NewMemberAdmission(GinkgoT().TempDir(), "127.0.0.1:"+strconv.Itoa(ports[0]))
		Expect(err).NotTo(HaveOccurred())
		memberAdmission[name] = admission
		env, err := framework.Start(ctx, framework.Options{
			Name: "hosted-" + name, Harness: true, CRDs: framework.SpokeCRDs, Namespaces: []string{agentNamespace},
			APIServerFlags: flags,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		Expect(fleet.InstallReservationPriorityClass(ctx, env.Cluster)).To(Succeed())
		Expect(env.Cluster.AddNode(ctx, wrappers.MakeNode(nodeOf(name)).GPU(2, "NVIDIA-GeForce-RTX-3090", "ampere").Obj())).To(Succeed())
		members[name] = env
	}

	agent, err = harness.StartProcess("hosted-agent", filepath.Join(binDir, "spoke"), []string{
		"--namespace", agentNamespace,
		"--clusters-from", "kubeconfig-secrets",
		"--kubeconfig-namespace", membersNamespace,
		"--webhook-bind-address", "127.0.0.1",
		"--webhook-port", strconv.Itoa(ports[0]),
		"--webhook-url", webhookURL,
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(ports[1]),
		"--metrics-bind-address", "0",
		"--hub-address", hub.Address(),
		"--hub-ca-file", caFile,
		"--member-webhook-probe-interval", "1s",
		"--member-request-timeout", "5s",
	}, dir, "KUBECONFIG="+kubeconfigPath)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(agent.Stop)
}, NodeTimeout(6*time.Minute))

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() && agent != nil {
		AddReportEntry("agent log", agent.Tail(200))
	}
})

func nodeOf(member string) string { return "gpu-" + member }

// addMember writes the member's kubeconfig Secret, with a join token of its
// own, into the management cluster, annotations added, and mounts the client
// Secret the agent writes then for the member's API server.
func addMember(ctx context.Context, name string, annotations map[string]string) {
	GinkgoHelper()
	kubeconfig := inlineKubeconfig(name)
	token, err := hubtest.CreateToken(ctx, hubEnv.Client, agentNamespace, time.Hour, name)
	Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: membersNamespace, Name: name,
			Labels:      map[string]string{hosted.MemberLabel: "true"},
			Annotations: annotations,
		},
		Data: map[string][]byte{hosted.KubeconfigKey: kubeconfig, hosted.JoinTokenKey: []byte(token)},
	}
	Expect(management.Client.Create(ctx, secret)).To(Succeed())
	Expect(memberAdmission[name].Mount(ctx, managementKube, membersNamespace, name, time.Minute)).To(Succeed())
}

// inlineKubeconfig is the member's admin kubeconfig with its certificates
// inline: the harness's names files, which a member kubeconfig must not.
func inlineKubeconfig(name string) []byte {
	GinkgoHelper()
	loaded, err := clientcmd.LoadFromFile(members[name].Cluster.KubeconfigPath)
	Expect(err).NotTo(HaveOccurred())
	Expect(clientcmdapi.FlattenConfig(loaded)).To(Succeed())
	kubeconfig, err := clientcmd.Write(*loaded)
	Expect(err).NotTo(HaveOccurred())
	return kubeconfig
}

// bindHostedRole creates the Role of the overlay file at path and binds it
// to user.
func bindHostedRole(ctx context.Context, path, user string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: no Role", path)
		}
		if err != nil {
			return err
		}
		role := &rbacv1.Role{}
		if err := yaml.UnmarshalStrict(doc, role); err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if role.Kind != "Role" {
			continue
		}
		if err := management.Client.Create(ctx, role); err != nil {
			return err
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: role.Namespace, Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}
		return management.Client.Create(ctx, binding)
	}
}

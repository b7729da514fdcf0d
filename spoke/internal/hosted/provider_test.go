package hosted

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: edge, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: agent, user: {token: "t"}}]
contexts: [{name: edge, context: {cluster: edge, user: agent}}]
current-context: edge
`

func memberSecret(name string, annotations map[string]string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "members", Name: name, Annotations: annotations, Labels: map[string]string{MemberLabel: "true"}}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestMemberSecretErrorsNameTheKey(t *testing.T) {
	cases := map[string]struct {
		secret         *corev1.Secret
		defaultURL     string
		wantName       string
		wantWebhookURL string
		wantErrs       []string
	}{
		"kubeconfig only: named after the Secret, the agent's webhook URL": {
			secret:         memberSecret("edge-1", nil, map[string]string{KubeconfigKey: kubeconfig}),
			defaultURL:     "https://webhooks.example.com",
			wantName:       "edge-1",
			wantWebhookURL: "https://webhooks.example.com",
		},
		"annotations override name and URL": {
			secret: memberSecret("s", map[string]string{ClusterNameAnnotation: "edge-2", WebhookURLAnnotation: "https://10.1.0.1:9443"},
				map[string]string{KubeconfigKey: kubeconfig}),
			wantName:       "edge-2",
			wantWebhookURL: "https://10.1.0.1:9443",
		},
		"no kubeconfig": {
			secret:   memberSecret("edge-3", nil, nil),
			wantErrs: []string{"data[kubeconfig]: required"},
		},
		"kubeconfig that is none": {
			secret:   memberSecret("edge-4", nil, map[string]string{KubeconfigKey: "not: [a kubeconfig"}),
			wantErrs: []string{"data[kubeconfig]"},
		},
		"cluster name that is no DNS label, plain-http webhook": {
			secret: memberSecret("edge-5", map[string]string{ClusterNameAnnotation: "Edge_5", WebhookURLAnnotation: "http://10.1.0.1"},
				map[string]string{KubeconfigKey: kubeconfig}),
			wantErrs: []string{ClusterNameAnnotation, WebhookURLAnnotation},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := New(Options{Namespace: "members", Scheme: runtime.NewScheme(), DefaultWebhookURL: tc.defaultURL, RequestTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			m, hash, err := p.parse(tc.secret)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("parse accepted the Secret, want errors naming %v", tc.wantErrs)
				}
				for _, want := range tc.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if diff := cmp.Diff(tc.wantName, m.Name); diff != "" {
				t.Errorf("name (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWebhookURL, m.WebhookURL); diff != "" {
				t.Errorf("webhook URL (-want +got):\n%s", diff)
			}
			if m.Config.Timeout != 3*time.Second {
				t.Errorf("request timeout %s, want 3s", m.Config.Timeout)
			}
			if hash == "" {
				t.Error("no hash")
			}
		})
	}
}

func TestChangedWebhookURLRestartsTheMember(t *testing.T) {
	p, err := New(Options{Namespace: "members", Scheme: runtime.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	_, before, err := p.parse(memberSecret("edge", map[string]string{WebhookURLAnnotation: "https://a.example.com"}, map[string]string{KubeconfigKey: kubeconfig, JoinTokenKey: "one"}))
	if err != nil {
		t.Fatal(err)
	}
	_, newToken, err := p.parse(memberSecret("edge", map[string]string{WebhookURLAnnotation: "https://a.example.com"}, map[string]string{KubeconfigKey: kubeconfig, JoinTokenKey: "two"}))
	if err != nil {
		t.Fatal(err)
	}
	_, newURL, err := p.parse(memberSecret("edge", map[string]string{WebhookURLAnnotation: "https://b.example.com"}, map[string]string{KubeconfigKey: kubeconfig, JoinTokenKey: "one"}))
	if err != nil {
		t.Fatal(err)
	}
	if before != newToken {
		t.Error("a new join token restarts the member; it should only be read at the next join")
	}
	if before == newURL {
		t.Error("a new webhook URL does not restart the member")
	}
}

// TestWebhookOfAMemberNotServedSaysSo: the member's own API server (its
// client certificate) learns that this replica does not serve it.
func TestWebhookOfAMemberNotServedSaysSo(t *testing.T) {
	ca := newTestClientCA(t, fakeManagement(t), clocktesting.NewFakeClock(time.Now()), 0)
	w := &Webhooks{Scheme: runtime.NewScheme(), ClientCA: ca}
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","object":{}}}`
	req := asMember(t, ca, "edge-9", httptest.NewRequest(http.MethodPost, PathPrefix+"edge-9/mutate-v1-pod", strings.NewReader(body)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `member cluster \"edge-9\" is not served by this agent replica`) {
		t.Errorf("answer does not say the member is not served: %s", rec.Body.String())
	}
	if !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Errorf("answer allows the request: %s", rec.Body.String())
	}
}

func TestMemberKubeconfigThatRunsProgramsOrReadsAgentFilesIsRefused(t *testing.T) {
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: edge\ncontexts: [{name: edge, context: {cluster: edge, user: agent}}]\n"
	const server = `clusters: [{name: edge, cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: "Zm9v"}}]` + "\n"
	cases := map[string]struct {
		kubeconfig string
		wantErr    string // "" accepted
	}{
		"inline token and CA data": {
			kubeconfig: head + server + `users: [{name: agent, user: {token: "t"}}]`,
		},
		"inline client certificate data": {
			kubeconfig: head + server + `users: [{name: agent, user: {client-certificate-data: "Zm9v", client-key-data: "Zm9v"}}]`,
		},
		"exec plugin": {
			kubeconfig: head + server + `users: [{name: agent, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "id"]}}}]`,
			wantErr:    "users[agent].user.exec",
		},
		"auth provider": {
			kubeconfig: head + server + `users: [{name: agent, user: {auth-provider: {name: oidc}}}]`,
			wantErr:    "users[agent].user.auth-provider",
		},
		"the agent's own ServiceAccount token file": {
			kubeconfig: head + server + `users: [{name: agent, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]`,
			wantErr:    "users[agent].user.tokenFile",
		},
		"client certificate and key files": {
			kubeconfig: head + server + `users: [{name: agent, user: {client-certificate: /etc/tls/tls.crt, client-key: /etc/tls/tls.key}}]`,
			wantErr:    "users[agent].user.client-key",
		},
		"CA file": {
			kubeconfig: head + `clusters: [{name: edge, cluster: {server: "https://10.0.0.1:6443", certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt}}]` + "\n" + `users: [{name: agent, user: {token: "t"}}]`,
			wantErr:    "clusters[edge].cluster.certificate-authority",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := New(Options{Namespace: "members", Scheme: runtime.NewScheme()})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = p.parse(memberSecret("edge", nil, map[string]string{KubeconfigKey: tc.kubeconfig}))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused an inline kubeconfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted a kubeconfig with %s", tc.wantErr)
			}
			for _, want := range []string{tc.wantErr, "Secret members/edge"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

// TestOnlyTheProbeProvesTheMemberReachesTheWebhooks: requests of the
// member's API server other than the probe's (unknown paths, other objects,
// real creates) do not hide a member whose probe does not reach the agent;
// the probe's own dry-run create of the probe Machine does. (Requests of
// anyone else are refused before, TestOnlyTheMembersOwnAPIServerIsAnswered.)
func TestOnlyTheProbeProvesTheMemberReachesTheWebhooks(t *testing.T) {
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestClientCA(t, fakeManagement(t), clocktesting.NewFakeClock(time.Now()), 0)
	w := &Webhooks{Scheme: scheme, ClientCA: ca}
	hooks := w.newMemberHooks(nil)
	w.members = map[string]*memberHooks{"edge": hooks}
	review := func(name string, dryRun bool) string {
		return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"imperator.tenzen-y.io","version":"v1alpha1","kind":"Machine"},"resource":{"group":"imperator.tenzen-y.io","version":"v1alpha1","resource":"machines"},"name":%q,"operation":"CREATE","dryRun":%t,"object":{"apiVersion":"imperator.tenzen-y.io/v1alpha1","kind":"Machine","metadata":{"name":%q}}}}`, name, dryRun, name)
	}
	send := func(path, body string) {
		req := asMember(t, ca, "edge", httptest.NewRequest(http.MethodPost, PathPrefix+"edge"+path, strings.NewReader(body)))
		req.Header.Set("Content-Type", "application/json")
		w.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("/no-such-webhook", review(ProbeMachineName, true))
	send(machinevalidator.WebhookPath, review("team-a", true))
	send(machinevalidator.WebhookPath, review(ProbeMachineName, false))
	if got := hooks.lastRequest.Load(); got != 0 {
		t.Fatalf("requests other than the probe's counted as the member reaching the webhooks")
	}
	before := time.Now().UnixNano()
	send(machinevalidator.WebhookPath, review(ProbeMachineName, true))
	if got := hooks.lastRequest.Load(); got < before {
		t.Fatalf("the probe's request was not counted")
	}
}

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestKubeconfigCredentials: the token imperatorctl sends is the one the
// kubeconfig user presents to its API server, whatever its source; a user
// the hub cannot take (certificate only, password) or a context not in the
// file is refused with a message saying why. Nothing is sent to the
// kubeconfig's server.
func TestKubeconfigCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tokenFile := write("token", "from-a-file\n")
	credential := write("credential.json", `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-a-plugin"}}`)
	kubeconfig := write("kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: https://127.0.0.1:1
contexts:
- {name: static, context: {cluster: hub, user: static}}
- {name: file, context: {cluster: hub, user: file}}
- {name: plugin, context: {cluster: hub, user: plugin}}
- {name: certificate, context: {cluster: hub, user: certificate}}
- {name: password, context: {cluster: hub, user: password}}
- {name: impersonating, context: {cluster: hub, user: impersonating}}
current-context: static
users:
- name: static
  user: {token: static-token}
- name: file
  user: {tokenFile: `+tokenFile+`}
- name: plugin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/cat
      args: [`+credential+`]
      interactiveMode: Never
- name: certificate
  user: {client-certificate-data: "", client-key-data: ""}
- name: password
  user: {username: alice, password: secret}
- name: impersonating
  user: {token: admin-token, as: viewer, as-groups: [viewers]}
`)
	cases := map[string]struct {
		context   string
		wantToken string
		wantErr   string
		wantCode  codes.Code
	}{
		"the current context":             {wantToken: "static-token"},
		"a token file":                    {context: "file", wantToken: "from-a-file"},
		"an exec plugin":                  {context: "plugin", wantToken: "from-a-plugin"},
		"a user with no token at all":     {context: "certificate", wantErr: "no bearer token", wantCode: codes.Unauthenticated},
		"a user with a password":          {context: "password", wantErr: "password"},
		"a context not in the kubeconfig": {context: "elsewhere", wantErr: "elsewhere"},
		// The hub sees the token's own user: sending it would act with
		// the rights the kubeconfig meant to give up.
		"a user impersonating another": {context: "impersonating", wantErr: "impersonates"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			creds, err := newKubeCredentials(kubeconfig, tc.context)
			var md map[string]string
			if err == nil {
				md, err = creds.GetRequestMetadata(context.Background())
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if tc.wantCode != codes.OK && status.Code(err) != tc.wantCode {
					t.Errorf("code %s, want %s", status.Code(err), tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := md["authorization"], "Bearer "+tc.wantToken; got != want {
				t.Errorf("authorization %q, want %q", got, want)
			}
		})
	}
}

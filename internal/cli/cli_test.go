package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/internal/ctlconfig"
)

func TestResolveConfig(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ca.crt", "me.crt", "me.key", "other.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(`current-context: prod
contexts:
- name: prod
  hub: hub.example.com:9443
  certificate-authority: ca.crt
  client-certificate: me.crt
  client-key: me.key
- name: lab
  hub: 10.0.0.1:9443
  server-name: hub.lab
  certificate-authority-data: inline-ca
  client-certificate-data: inline-cert
  client-key-data: inline-key
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ctlconfig.Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		context string
		over    overrides
		want    connection
		wantErr string
	}{
		"current context, relative paths": {
			want: connection{hub: "hub.example.com:9443", serverName: "hub.example.com", caPEM: []byte("ca.crt"), certPEM: []byte("me.crt"), keyPEM: []byte("me.key")},
		},
		"inline data and server name": {
			context: "lab",
			want:    connection{hub: "10.0.0.1:9443", serverName: "hub.lab", caPEM: []byte("inline-ca"), certPEM: []byte("inline-cert"), keyPEM: []byte("inline-key")},
		},
		"flags win": {
			over: overrides{hub: "127.0.0.1:1", cert: filepath.Join(dir, "other.crt")},
			want: connection{hub: "127.0.0.1:1", serverName: "127.0.0.1", caPEM: []byte("ca.crt"), certPEM: []byte("other.crt"), keyPEM: []byte("me.key")},
		},
		"unknown context": {context: "nope", wantErr: `context "nope" is not in the configuration file`},
		"bad address":     {over: overrides{hub: "no-port"}, wantErr: `hub address "no-port": want host:port`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, err := cfg.Lookup(tc.context)
			var got *connection
			if err == nil {
				got, err = resolve(ctx, tc.over)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got, cmp.AllowUnexported(connection{})); diff != "" {
				t.Errorf("connection (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	cases := map[string]struct {
		args       []string
		wantStderr string
	}{
		"no command":                              {args: nil, wantStderr: "Exit codes:"},
		"unknown command":                         {args: []string{"nodes"}, wantStderr: `unknown command "nodes"`},
		"unknown flag":                            {args: []string{"clusters", "--nope"}, wantStderr: "unknown flag: --nope"},
		"bad output":                              {args: []string{"clusters", "-o", "xml"}, wantStderr: `--output "xml"`},
		"watch capacity":                          {args: []string{"capacity", "x", "--watch"}, wantStderr: "unknown flag: --watch"},
		"cluster name that is no name":            {args: []string{"clusters", "Bad_Name"}, wantStderr: `cluster name "Bad_Name"`},
		"two machine types":                       {args: []string{"machines", "a", "b"}, wantStderr: "accepts at most 1 arg"},
		"machine type and another --type":         {args: []string{"machines", "a", "--type", "b"}, wantStderr: "name different types"},
		"usage of a type that is no name":         {args: []string{"usage", "--type", "Bad_x"}, wantStderr: `--type "Bad_x"`},
		"usage type and group disagree":           {args: []string{"usage", "--type", "g1/t", "--group", "g2"}, wantStderr: "name different groups"},
		"-o name of a command without objects":    {args: []string{"version", "-o", "name"}, wantStderr: "is for the commands that list objects"},
		"jsonpath that does not parse":            {args: []string{"clusters", "-o", "jsonpath={.clusters"}, wantStderr: "--output jsonpath"},
		"jsonpath without a template":             {args: []string{"clusters", "-o", "jsonpath="}, wantStderr: "want a template"},
		"custom-columns without a path":           {args: []string{"clusters", "-o", "custom-columns=NAME"}, wantStderr: `column 1 ("NAME") must be HEADER:PATH`},
		"-o name with an argument":                {args: []string{"clusters", "-o", "name=x"}, wantStderr: "takes no argument"},
		"hold list of a bad name":                 {args: []string{"hold", "list", "Bad_Hold"}, wantStderr: `hold name "Bad_Hold"`},
		"capacity type and shape":                 {args: []string{"capacity", "x", "--gpu", "1"}, wantStderr: "not both"},
		"capacity zero count":                     {args: []string{"capacity", "x", "--count", "0"}, wantStderr: "--count 0"},
		"capacity bad type":                       {args: []string{"capacity", "Bad_Type"}, wantStderr: `machine type "Bad_Type"`},
		"capacity bad count":                      {args: []string{"capacity", "x", "--count", "many"}, wantStderr: `invalid argument "many" for "--count"`},
		"token without subcommand":                {args: []string{"token"}, wantStderr: "token create|list|revoke"},
		"unknown token command":                   {args: []string{"token", "rotate"}, wantStderr: `unknown token command "rotate"`},
		"revoke without id":                       {args: []string{"token", "revoke"}, wantStderr: "token revoke ID"},
		"negative timeout":                        {args: []string{"usage", "--timeout", "-1s"}, wantStderr: "--timeout -1s: must be positive"},
		"completion of a shell we do not support": {args: []string{"completion", "powershell"}, wantStderr: `invalid argument "powershell"`},
		"no hub configured":                       {args: []string{"clusters"}, wantStderr: "no hub address"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
			if code := Run(context.Background(), tc.args, env); code != ExitUsage {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, ExitUsage, errb.String())
			}
			if !strings.Contains(errb.String(), tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", errb.String(), tc.wantStderr)
			}
		})
	}
}

func TestEnumName(t *testing.T) {
	for in, want := range map[string]string{
		"CLUSTER_STATE_OFFLINE":          "Offline",
		"EXCLUSION_REASON_NO_SUCH_TYPE":  "NoSuchType",
		"CLUSTER_STATE_UNSPECIFIED":      "-",
		"EXCLUSION_REASON_WEIRD__DOUBLE": "WeirdDouble",
		"EXCLUSION_REASON_":              "-",
	} {
		prefix := "CLUSTER_STATE_"
		if strings.HasPrefix(in, "EXCLUSION") {
			prefix = "EXCLUSION_REASON_"
		}
		if got := enumName(in, prefix); got != want {
			t.Errorf("enumName(%q) = %q, want %q", in, got, want)
		}
	}
}

// failingWriter is a stdout that is gone (a closed pipe, a full disk).
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// `imperatorctl version --client | head -0` must not report success when
// nothing of the answer could be written.
func TestAnAnswerThatCannotBeWrittenFailsTheCommand(t *testing.T) {
	var errb bytes.Buffer
	env := Env{Stdout: failingWriter{}, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := Run(context.Background(), []string{"version", "--client"}, env); code == ExitOK {
		t.Fatalf("exit code = %d, want a failure", code)
	}
	if !strings.Contains(errb.String(), "writing the answer: broken pipe") {
		t.Errorf("stderr = %q, want it to say the answer could not be written", errb.String())
	}
}

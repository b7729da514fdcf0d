package machine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/imperator-federation/imperator/test/util/benchstat"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// scaleAgentUser is the user of the agent's client certificate: the API
// server's audit log records this user's writes, and nobody else's.
const scaleAgentUser = "imperator-agent"

// scaleLeaderLease is the agent's leader election Lease (--leader-election-id,
// given explicitly): its renewals are not the controllers' writes.
const scaleLeaderLease = "imperator-spoke-agent"

// scaleAgent is BenchmarkSpokeAtScale's spoke agent: the spoke binary run as
// its own process, with the flags deploy/spoke gives it (leader election,
// the default worker count, caches and logging) and no hub. Its webhooks
// are registered at a URL on 127.0.0.1, as the local fleet's agents are.
type scaleAgent struct {
	proc       *harness.Process
	metricsURL string
	auditLog   string
}

// buildSpoke returns the path of the spoke binary: $IMPERATOR_BIN_DIR's, or
// one built into dir (repo.Binaries).
func buildSpoke(ctx context.Context, dir string) (string, error) {
	binDir, err := repo.Binaries(ctx, dir, "spoke")
	if err != nil {
		return "", err
	}
	return filepath.Join(binDir, "spoke"), nil
}

// scaleAuditPolicy records every write of scaleAgentUser (metadata only,
// once complete) and nothing else.
const scaleAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + scaleAgentUser + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// scaleAuditFlags writes scaleAuditPolicy into dir and returns the
// kube-apiserver flags that log its events to auditLog.
func scaleAuditFlags(dir string) (flags []string, auditLog string, err error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(scaleAuditPolicy), 0o644); err != nil {
		return nil, "", fmt.Errorf("writing the audit policy: %w", err)
	}
	auditLog = filepath.Join(dir, "audit.log")
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog}, auditLog, nil
}

// startScaleAgent starts the agent on cluster with a client certificate of
// its own (scaleAgentUser, in system:masters) and waits until it is ready
// (its webhook server serves). Its log is <cluster.Dir>/imperator-agent.log.
func startScaleAgent(ctx context.Context, cluster *harness.Cluster, bin, namespace, auditLog string) (*scaleAgent, error) {
	kubeconfig, err := writeAgentKubeconfig(cluster)
	if err != nil {
		return nil, err
	}
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	webhookPort, healthPort, metricsPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), strconv.Itoa(ports[2])
	args := []string{
		"--leader-elect=true",
		"--leader-election-id", scaleLeaderLease,
		"--namespace", namespace,
		"--webhook-bind-address", "127.0.0.1",
		"--webhook-port", webhookPort,
		"--webhook-url", "https://127.0.0.1:" + webhookPort,
		"--health-probe-bind-address", "127.0.0.1:" + healthPort,
		"--metrics-bind-address", "127.0.0.1:" + metricsPort,
	}
	proc, err := harness.StartProcess("imperator-agent", bin, args, cluster.Dir, "KUBECONFIG="+kubeconfig)
	if err != nil {
		return nil, err
	}
	a := &scaleAgent{proc: proc, metricsURL: "http://127.0.0.1:" + metricsPort + "/metrics", auditLog: auditLog}
	if err := a.waitReady(ctx, "http://127.0.0.1:"+healthPort+"/readyz"); err != nil {
		return nil, errors.Join(err, proc.Stop())
	}
	return a, nil
}

// writeAgentKubeconfig issues scaleAgentUser's client certificate and
// writes a kubeconfig with it next to the cluster's.
func writeAgentKubeconfig(cluster *harness.Cluster) (string, error) {
	certPEM, keyPEM, err := cluster.CA.IssueClient(scaleAgentUser, []string{"system:masters"}, 24*time.Hour)
	if err != nil {
		return "", fmt.Errorf("issuing the agent's client certificate: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster.Name] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthority: cluster.Config.CAFile}
	cfg.AuthInfos[scaleAgentUser] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[cluster.Name] = &clientcmdapi.Context{Cluster: cluster.Name, AuthInfo: scaleAgentUser}
	cfg.CurrentContext = cluster.Name
	path := filepath.Join(cluster.Dir, "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the agent's kubeconfig: %w", err)
	}
	return path, nil
}

// waitReady polls url until it answers 200, for two minutes at most; it
// fails at once, with the end of the agent's log, if the agent exits.
func (a *scaleAgent) waitReady(ctx context.Context, url string) error {
	if err := a.proc.WaitReady(ctx, url, 2*time.Minute); err != nil {
		return fmt.Errorf("waiting for the agent to be ready: %w\n%s", err, a.proc.Tail(30))
	}
	return nil
}

// stop stops the agent; an agent that exited on its own is an error.
func (a *scaleAgent) stop() error {
	if !a.proc.Running() {
		return fmt.Errorf("the agent exited during the benchmark:\n%s", a.proc.Tail(30))
	}
	return a.proc.Stop()
}

// memory returns the agent's resident memory (VmRSS) and its peak (VmHWM)
// in MiB, from /proc/<pid>/status.
func (a *scaleAgent) memory() (rss, hwm float64, err error) {
	if !a.proc.Running() {
		return 0, 0, fmt.Errorf("the agent exited:\n%s", a.proc.Tail(30))
	}
	rssBytes, hwmBytes, err := harness.ProcessMemory(a.proc.Pid())
	return float64(rssBytes) / (1 << 20), float64(hwmBytes) / (1 << 20), err
}

// metrics scrapes the agent's /metrics.
func (a *scaleAgent) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read only
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("reading the agent's metrics: %s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the agent's metrics: %w", err)
	}
	return families, nil
}

// writes counts the writes the API server has completed for the agent so
// far, by resource (from its audit log); the renewals of its leader
// election Lease count apart, as "leader-lease".
func (a *scaleAgent) writes() (map[string]int, error) {
	f, err := os.Open(a.auditLog)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var event struct {
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Name        string `json:"name"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &event); err != nil {
			return nil, fmt.Errorf("reading %s: %w", a.auditLog, err)
		}
		if event.Stage != "ResponseComplete" || event.User.Username != scaleAgentUser {
			continue
		}
		resource := event.ObjectRef.Resource
		if resource == "leases" && event.ObjectRef.Name == scaleLeaderLease {
			resource = "leader-lease"
		}
		if event.ObjectRef.Subresource != "" {
			resource += "/" + event.ObjectRef.Subresource
		}
		out[resource]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", a.auditLog, err)
	}
	return out, nil
}

// reconcileHistogram is controller-runtime's reconcile-time histogram of
// the agent, summed over every controller.
func (a *scaleAgent) reconcileHistogram(ctx context.Context) (benchstat.Histogram, error) {
	families, err := a.metrics(ctx)
	if err != nil {
		return benchstat.Histogram{}, err
	}
	return benchstat.HistogramOf(families["controller_runtime_reconcile_time_seconds"]), nil
}

// reconcileCounts lists controller-runtime's reconcile count of each of
// the agent's controllers, with the workqueue adds, as
// "name=reconciles/adds".
func (a *scaleAgent) reconcileCounts(ctx context.Context) string {
	families, err := a.metrics(ctx)
	if err != nil {
		return err.Error()
	}
	reconciles, adds := map[string]float64{}, map[string]float64{}
	for _, f := range families {
		var into map[string]float64
		var label string
		switch f.GetName() {
		case "controller_runtime_reconcile_total":
			into, label = reconciles, "controller"
		case "workqueue_adds_total":
			into, label = adds, "name"
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					into[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(reconciles)) {
		out = append(out, fmt.Sprintf("%s=%.0f/%.0f", name, reconciles[name], adds[name]))
	}
	return strings.Join(out, " ")
}

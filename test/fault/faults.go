// Package fault is the fault suite of Imperator Federation (`make fault`): a
// real fleet (test/util/fleet: a hub cluster, two spoke clusters, the hub and
// an agent per spoke as processes) into which faults are injected for real —
// a TCP fault proxy between each agent and the hub, processes killed, API
// servers stopped. Every fault asserts two things a platform team relies on:
// nothing is lost (once the fault is over, the hub's answer equals each
// spoke's truth) and there is no false alarm (a cluster that stays reachable
// is never shown as anything but Available). The time to detect and the
// time to recover of each fault go into one table, printed at the end.
package fault

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	// poll is how often the suite asks the hub while it measures.
	poll = 250 * time.Millisecond
	// settle bounds how long the fleet may take to agree again after a fault.
	settle = 90 * time.Second
	// burstMachine is a Machine of its own on every spoke, with one machine
	// type that no node serves: changing its `available` changes the
	// figures the spoke reports without creating or deleting pods.
	burstMachine = "fault-burst"
	burstType    = "burst-unit"
	// certificatesAnnotation is the hub's record, on a ManagedCluster, of
	// the spoke certificates it accepts (registry.CertificatesAnnotation;
	// the suite reads it as a user would, without importing the hub).
	certificatesAnnotation = "imperator.tenzen-y.io/certificates"
	// validatorConfiguration is the agents' ValidatingWebhookConfiguration.
	validatorConfiguration = "imperator-machine-validator"
	// heartbeatInterval is the agents' heartbeat interval (the reporter's
	// default, which the fleet keeps).
	heartbeatInterval = 5 * time.Second
)

// Row is one line of the fault table.
type Row struct {
	Fault string
	// Detect is how long the hub took to show the fault (zero when the
	// fault must not show, e.g. a slow link).
	Detect time.Duration
	// Recover is how long after the fault ended the hub's answer equalled
	// the spokes' truth again.
	Recover time.Duration
	Note    string
}

// Table collects the rows of every fault.
type Table struct {
	mu   sync.Mutex
	rows []Row
}

// Add records a row.
func (t *Table) Add(r Row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, r)
}

// String renders the table as Markdown.
func (t *Table) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	_, _ = fmt.Fprintln(w, "| fault\t| time to detect\t| time to recover\t| note\t|")
	_, _ = fmt.Fprintln(w, "|---\t|---\t|---\t|---\t|")
	for _, r := range t.rows {
		detect := "—"
		if r.Detect > 0 {
			detect = r.Detect.Round(10 * time.Millisecond).String()
		}
		_, _ = fmt.Fprintf(w, "| %s\t| %s\t| %s\t| %s\t|\n", r.Fault, detect, r.Recover.Round(10*time.Millisecond), r.Note)
	}
	_ = w.Flush()
	return b.String()
}

// BurstMachine is the Machine that fault specs change to make a spoke report.
func BurstMachine(available int32) *imperatorv1alpha1.Machine {
	return wrappers.MakeMachine(burstMachine, burstMachine).Type(burstType, "1", "1Gi", available).Obj()
}

// SetBurstAvailable changes the burst Machine's `available` on one spoke.
func SetBurstAvailable(ctx context.Context, c client.Client, available int32) error {
	return e2e.UpdateMachine(ctx, c, burstMachine, func(m *imperatorv1alpha1.Machine) {
		for i := range m.Spec.MachineTypes {
			if m.Spec.MachineTypes[i].Name == burstType {
				m.Spec.MachineTypes[i].Available = available
			}
		}
	})
}

// HubMatchesSpokes returns nil when, for every spoke, every Machine's status
// has caught up with its spec and the hub shows the spoke Available with
// exactly the figures of every machine type in those statuses; otherwise an
// error saying what differs.
func HubMatchesSpokes(ctx context.Context, env *e2e.Env) error {
	clusters, err := env.Ctl.Clusters(ctx)
	if err != nil {
		return err
	}
	usage, err := env.Ctl.Usage(ctx)
	if err != nil {
		return err
	}
	for _, name := range spokeNames(env) {
		if st := e2e.ClusterNamed(clusters, name).GetState(); st != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
			return fmt.Errorf("hub shows %s %s", name, st)
		}
		var machines imperatorv1alpha1.MachineList
		if err := env.Spokes[name].Client.List(ctx, &machines); err != nil {
			return fmt.Errorf("listing the Machines of %s: %w", name, err)
		}
		for i := range machines.Items {
			m := &machines.Items[i]
			if !StatusCurrent(m) {
				return fmt.Errorf("the status of Machine %s/%s has not caught up with its spec", name, m.Name)
			}
			for _, am := range m.Status.AvailableMachines {
				hub := e2e.UsageOf(usage, name, e2e.Group(m), am.Name)
				if hub == nil {
					return fmt.Errorf("hub has no usage of %s %s/%s", name, e2e.Group(m), am.Name)
				}
				got := [4]int32{hub.GetMaximum(), hub.GetReserved(), hub.GetUsed(), hub.GetWaiting()}
				want := [4]int32{am.Usage.Maximum, am.Usage.Reserved, am.Usage.Used, am.Usage.Waiting}
				if got != want {
					return fmt.Errorf("hub usage of %s %s/%s is maximum/reserved/used/waiting %v, the spoke says %v",
						name, e2e.Group(m), am.Name, got, want)
				}
			}
		}
	}
	return nil
}

// StatusCurrent reports whether the agent has written m's status for its
// current spec: every condition observed the current generation.
func StatusCurrent(m *imperatorv1alpha1.Machine) bool {
	if len(m.Status.Conditions) == 0 {
		return false
	}
	for _, c := range m.Status.Conditions {
		if c.ObservedGeneration != m.Generation {
			return false
		}
	}
	return true
}

// ClusterState returns the state the hub shows for cluster.
func ClusterState(ctx context.Context, env *e2e.Env, cluster string) (queryv1.ClusterState, error) {
	resp, err := env.Ctl.Clusters(ctx)
	if err != nil {
		return queryv1.ClusterState_CLUSTER_STATE_UNSPECIFIED, err
	}
	return e2e.ClusterNamed(resp, cluster).GetState(), nil
}

// WaitRecovered waits until the hub matches every spoke and returns how long
// that took from since.
func WaitRecovered(ctx context.Context, env *e2e.Env, since time.Time) time.Duration {
	Eventually(ctx, func() error { return HubMatchesSpokes(ctx, env) }).
		WithTimeout(settle).WithPolling(poll).Should(Succeed(), "the hub's answer equals the spokes' truth again")
	return time.Since(since)
}

// WaitReporting waits until the agent of spoke that runs now reports to the
// hub (its imperator_spoke_reporter_state is "reporting"): after a restart
// the hub may still match the spoke from the figures of the agent before,
// while the new one has not opened its stream, and a fleet hold asked then
// finds nobody to answer it.
func WaitReporting(ctx context.Context, f *fleet.Fleet, spoke string) {
	httpClient := &http.Client{Timeout: 5 * time.Second}
	Eventually(ctx, func() error {
		url := f.AgentMetricsURL(spoke)
		if url == "" {
			return fmt.Errorf("the agent of %s serves no metrics", spoke)
		}
		resp, err := httpClient.Get(url)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "imperator_spoke_reporter_state{") && strings.Contains(line, `state="reporting"`) && strings.HasSuffix(line, " 1") {
				return nil
			}
		}
		return fmt.Errorf("the agent of %s does not report to the hub yet", spoke)
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
}

// WaitState waits until the hub shows cluster in state and returns how long
// that took from since.
func WaitState(ctx context.Context, env *e2e.Env, cluster string, state queryv1.ClusterState, within time.Duration, since time.Time) time.Duration {
	Eventually(ctx, func() (queryv1.ClusterState, error) { return ClusterState(ctx, env, cluster) }).
		WithTimeout(within).WithPolling(poll).Should(Equal(state), "the hub's state of %s", cluster)
	return time.Since(since)
}

// ExpectAlwaysAvailable fails when the hub shows cluster in any state but
// Available while fn runs (polling every poll): the false alarm check.
func ExpectAlwaysAvailable(ctx context.Context, env *e2e.Env, clusters []string, fn func()) {
	stop := make(chan struct{})
	alarms := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(poll)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			resp, err := env.Ctl.Clusters(ctx)
			if err != nil {
				continue // the hub being briefly unreachable is not a false alarm of ours
			}
			for _, name := range clusters {
				if st := e2e.ClusterNamed(resp, name).GetState(); st != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
					select {
					case alarms <- fmt.Sprintf("%s shown %s at %s", name, st, time.Now().Format(time.StampMilli)):
					default:
					}
				}
			}
		}
	})
	func() {
		// Stop watching even when fn fails the spec (Gomega panics).
		defer wg.Wait()
		defer close(stop)
		fn()
	}()
	select {
	case alarm := <-alarms:
		Expect(alarm).To(BeEmpty(), "false alarm: a reachable cluster was shown as not Available")
	default:
	}
}

// spokeNames returns the names of the fleet's spokes, sorted.
func spokeNames(env *e2e.Env) []string {
	names := make([]string, 0, len(env.Spokes))
	for name := range env.Spokes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

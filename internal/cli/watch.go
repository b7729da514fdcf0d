package cli

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// reopenAfter is how long a Watch stream must have worked for its loss to
// be taken for the hub recycling the connection (its --max-connection-age)
// rather than the hub being unreachable.
const reopenAfter = 5 * time.Second

// watch streams cluster events; table output prints the header once and
// rows as events arrive (rows for a cluster's change, a "Removed" row of
// watch's own when it leaves), json/yaml print each event. The hub recycles
// connections every half hour or so: a stream that was working and ends
// Unavailable is opened again (the hub resends the current state); one that
// fails at once ends the watch with "hub unreachable".
func (c *command) watch(rows func(*table, *queryv1.ClusterEvent) error, columns []column, only ...string) error {
	var clusters []string
	for _, o := range only {
		if o != "" {
			clusters = append(clusters, o)
		}
	}
	header := true
	for {
		opened := time.Now()
		stream, err := c.client.Watch(c.ctx, &queryv1.WatchRequest{Clusters: clusters})
		if err != nil {
			return c.callError(err)
		}
		received := false
		for {
			ev, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				if status.Code(err) == codes.Unavailable && c.ctx.Err() == nil && (received || time.Since(opened) >= reopenAfter) {
					break
				}
				return c.callError(err)
			}
			received = true
			if c.printer.structured() {
				if err := c.printer.message(ev); err != nil {
					return err
				}
				continue
			}
			if c.printer.objectFormat() {
				// Each event is an object: its type and the cluster.
				if err := c.printer.objects(ev, []proto.Message{ev}, []string{"cluster/" + ev.GetCluster().GetName()}, header); err != nil {
					return err
				}
				header = false
				continue
			}
			t := &table{columns: columns}
			if ev.GetType() == queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED {
				// One row for every command: the cluster is gone.
				t.add(ev.GetCluster().GetName(), "Removed")
			} else if err := rows(t, ev); err != nil {
				return err
			}
			if err := c.printer.table(t, header); err != nil {
				return err
			}
			header = false
		}
	}
}

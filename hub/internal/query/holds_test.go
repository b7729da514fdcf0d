package query

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func TestValidateCreateHold(t *testing.T) {
	byType := &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}
	valid := func() *queryv1.CreateHoldRequest {
		return &queryv1.CreateHoldRequest{Name: "train-42", Target: byType, Count: 4, Ttl: durationpb.New(15 * time.Minute)}
	}
	cases := map[string]struct {
		change    func(*queryv1.CreateHoldRequest)
		wantField string
	}{
		"valid":                    {change: func(*queryv1.CreateHoldRequest) {}},
		"no name":                  {change: func(r *queryv1.CreateHoldRequest) { r.Name = "" }, wantField: "name"},
		"name guests cannot quote": {change: func(r *queryv1.CreateHoldRequest) { r.Name = "Train_42" }, wantField: "name"},
		"zero count":               {change: func(r *queryv1.CreateHoldRequest) { r.Count = 0 }, wantField: "count"},
		"count over 10000":         {change: func(r *queryv1.CreateHoldRequest) { r.Count = 10001 }, wantField: "count"},
		"no target":                {change: func(r *queryv1.CreateHoldRequest) { r.Target = nil }, wantField: "target"},
		"bad machine type": {change: func(r *queryv1.CreateHoldRequest) {
			r.Target.(*queryv1.CreateHoldRequest_MachineType).MachineType.Type = "X"
		}, wantField: "machine_type.type"},
		"bad shape quantity": {change: func(r *queryv1.CreateHoldRequest) {
			r.Target = &queryv1.CreateHoldRequest_Shape{Shape: &queryv1.ResourceShape{Cpu: "lots"}}
		}, wantField: "shape.cpu"},
		"unknown mode":              {change: func(r *queryv1.CreateHoldRequest) { r.Mode = 7 }, wantField: "mode"},
		"no ttl":                    {change: func(r *queryv1.CreateHoldRequest) { r.Ttl = nil }, wantField: "ttl"},
		"ttl under a minute":        {change: func(r *queryv1.CreateHoldRequest) { r.Ttl = durationpb.New(59 * time.Second) }, wantField: "ttl"},
		"ttl over seven days":       {change: func(r *queryv1.CreateHoldRequest) { r.Ttl = durationpb.New(7*24*time.Hour + time.Second) }, wantField: "ttl"},
		"namespace listed twice":    {change: func(r *queryv1.CreateHoldRequest) { r.Namespaces = []string{"a", "a"} }, wantField: "namespaces"},
		"namespace that is no name": {change: func(r *queryv1.CreateHoldRequest) { r.Namespaces = []string{"A b"} }, wantField: "namespaces"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := valid()
			req.Target = &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}
			tc.change(req)
			_, err := validateCreateHold(req)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("validateCreateHold() = %v, want no error", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.wantField+":") {
				t.Errorf("validateCreateHold() = %v, want InvalidArgument naming %s", err, tc.wantField)
			}
		})
	}
}

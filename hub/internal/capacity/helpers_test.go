package capacity

import (
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

func protoTransform() cmp.Option { return protocmp.Transform() }

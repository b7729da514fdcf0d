package integration

import "google.golang.org/protobuf/proto"

type protoMessage = proto.Message

package celcost

import (
	"errors"
	"reflect"
)

func errorsJoin(errs ...error) error { return errors.Join(errs...) }

func reflectTypeOf(v any) reflect.Type { return reflect.TypeOf(v) }

package capacity

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Machine types of a fleet repeat a handful of cpu and memory strings; the
// parsed values are cached so that a shape query over thousands of clusters
// does not parse the same quantities again and again. The cache only grows
// with distinct strings, which the spokes' CRD validation keeps few.
var quantities sync.Map // string -> parsedQuantity

type parsedQuantity struct {
	milli int64
	value int64
}

// maxCachedQuantities bounds the cache against a fleet reporting garbage.
const maxCachedQuantities = 4096

var cachedCount struct {
	sync.Mutex
	n int
}

func parse(s string) parsedQuantity {
	if v, ok := quantities.Load(s); ok {
		return v.(parsedQuantity)
	}
	p := parsedQuantity{milli: -1, value: -1}
	if q, err := resource.ParseQuantity(s); err == nil {
		p = parsedQuantity{milli: q.MilliValue(), value: q.Value()}
	}
	cachedCount.Lock()
	if cachedCount.n < maxCachedQuantities {
		if _, loaded := quantities.LoadOrStore(s, p); !loaded {
			cachedCount.n++
		}
	}
	cachedCount.Unlock()
	return p
}

// milliCPU is the cpu quantity s in millicores; -1 when s does not parse
// (such a type matches no cpu request).
func milliCPU(s string) int64 { return parse(s).milli }

// memoryBytes is the memory quantity s in bytes; -1 when s does not parse.
func memoryBytes(s string) int64 { return parse(s).value }

package nodepool

import (
	"sync"
	"sync/atomic"
)

// forEach calls fn(i) for every i in [0, n) on up to workers goroutines and
// returns when all calls have. Calls for different i must not share what
// they write.
func forEach(n, workers int, fn func(i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

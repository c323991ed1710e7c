package controllers

import (
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultReturnMemoryAfter is how long the policy controller waits after its last pass before
// it hands the memory the passes used back to the operating system.
const DefaultReturnMemoryAfter = 10 * time.Second

// memoryReturner hands the memory a burst of passes used back to the operating system once the
// passes stop. A pass over a large pool holds its snapshot and the planner's working memory
// beside the informer caches, and the garbage collector sets its next goal from that peak; the
// runtime then keeps the pages up to that goal until its next collection, up to two minutes
// later with nothing allocating, so the manager's resident memory at rest would read as the
// last pass's peak (measured: 414 MiB at 5,000 nodes for a 110 MB live heap; docs/benchmarks/scale.md).
// One collection after the burst sets the goal from the caches alone. It runs outside any
// reconcile, once per burst, never while passes follow each other.
type memoryReturner struct {
	clock clock.WithDelayedExecution
	after time.Duration
	do    func()
	mu    sync.Mutex
	timer clock.Timer
	// passes counts passed calls: a timer set before the latest pass does nothing.
	passes int
}

// newMemoryReturner returns memory after the given quiet time; nil (a no-op) when after is 0.
func newMemoryReturner(c clock.WithDelayedExecution, after time.Duration) *memoryReturner {
	if after <= 0 {
		return nil
	}
	return &memoryReturner{clock: c, after: after, do: debug.FreeOSMemory}
}

// passed notes a pass: the memory goes back once none has followed for the quiet time.
func (m *memoryReturner) passed() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.passes++
	if m.timer != nil {
		m.timer.Stop()
	}
	pass := m.passes
	m.timer = m.clock.AfterFunc(m.after, func() { m.fire(pass) })
}

func (m *memoryReturner) fire(pass int) {
	m.mu.Lock()
	latest := pass == m.passes
	m.mu.Unlock()
	if latest {
		m.do()
	}
}

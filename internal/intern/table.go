// Package intern hands out one shared copy of equal values. A fleet's objects repeat a few
// distinct values many thousands of times (a workload's labels, a GPU model's MIG profile
// table); a cache that keeps one copy of each holds a fraction of the memory.
//
// Shared values are read-only to every holder: a caller that writes into one writes into all.
package intern

import "sync"

// Table maps a key that identifies a value to the one copy of it handed out. It is bounded:
// past its size it starts afresh, and the values already handed out stay with their holders,
// so a stream of distinct values (a label that carries a pod's own name) costs at most one
// table, never a leak. The zero value is not usable; a nil Table shares nothing. It is safe for
// concurrent use.
type Table[V any] struct {
	mu      sync.Mutex
	maxSize int
	byKey   map[string]V
}

// NewTable makes a table that holds at most maxSize distinct values.
func NewTable[V any](maxSize int) *Table[V] {
	return &Table[V]{maxSize: max(1, maxSize)}
}

// Share returns the value handed out before under key, or v, which it hands out from now on.
func (t *Table[V]) Share(key string, v V) V {
	if t == nil {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if have, ok := t.byKey[key]; ok {
		return have
	}
	if t.byKey == nil || len(t.byKey) >= t.maxSize {
		t.byKey = make(map[string]V)
	}
	t.byKey[key] = v
	return v
}

// Len is how many values the table holds now.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}

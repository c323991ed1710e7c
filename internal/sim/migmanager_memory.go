// What the simulated mig-manager remembers per node: label changes as its informer delivers them, and the apply in progress.

package sim

import (
	"sync"
	"time"
)

// migManagerMemory is what mig-manager remembers about a node. The real one learns of label
// changes from an informer whose update handler compares the old and new value of
// nvidia.com/mig.config and queues the new one when it differs and is not empty; every such
// change is applied, even a value applied before (that is how unset+set retries). The
// simulator does the same: labelChanged records each change as it is delivered, so two quick
// changes are not lost when the reconciles they trigger coalesce.
type migManagerMemory struct {
	mu sync.Mutex
	// current is the label value last seen by the event handler.
	current string
	// requested is the latest non-empty value a change asked for, and seq counts such changes.
	requested string
	seq       uint64
	// handled is the seq whose apply has finished (success, failed or stuck).
	handled uint64
	// applying is the seq being applied while the state is pending (0 when idle), and since is
	// when it started; an apply delay counts from it.
	applying uint64
	since    time.Time
	// restart is the last AnnotationRestartMIGManager value seen.
	restart string
}

// labelChanged records the node's nvidia.com/mig.config value as an informer event delivers it,
// and reports whether it is a change mig-manager acts on.
func (m *migManagerMemory) labelChanged(value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == m.current {
		return false
	}
	m.current = value
	if value == "" {
		return false
	}
	m.requested = value
	m.seq++
	return true
}

// restarted records the node's AnnotationRestartMIGManager value as an event delivers it, and
// reports whether it restarts mig-manager: a new non-empty value does, and the restarted
// mig-manager applies the label's current value again, as a new pod does at start.
func (m *migManagerMemory) restarted(value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == m.restart {
		return false
	}
	m.restart = value
	if value == "" || m.current == "" {
		return false
	}
	m.requested = m.current
	m.seq++
	return true
}

// next returns the change to work on: its value and seq, and whether it was already begun.
func (m *migManagerMemory) next() (value string, seq uint64, begun bool, since time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seq == m.handled {
		return "", 0, false, time.Time{}, false
	}
	return m.requested, m.seq, m.applying == m.seq, m.since, true
}

func (m *migManagerMemory) begin(seq uint64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applying, m.since = seq, now
}

func (m *migManagerMemory) finish(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handled, m.applying = seq, 0
}

package sim

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Event reasons the simulator records on a Node when it stops or starts the node's agent, so
// that a test knows the agent is really down (nothing it publishes can still be on its way)
// before it acts on that.
const (
	reasonAgentStopped = "AgentStopped"
	reasonAgentStarted = "AgentStarted"
)

// Reasons the node's agent is down.
const (
	agentDownReboot = "the host is rebooting"
	agentDownFault  = "fault " + FaultAgentDown
)

// agentSwitch says whether a node's agent may run, and whether it does. mig-manager's reboot
// and the agent-down fault switch it; the node's agentRunner follows it.
type agentSwitch struct {
	mu sync.Mutex
	// down holds the reasons the agent may not run; it runs when there are none.
	down map[string]bool
	// running is true while the agent's manager runs.
	running bool
	// changed is closed, and replaced, on every change of down or running.
	changed chan struct{}
}

func (s *agentSwitch) changedLocked() chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

func (s *agentSwitch) notifyLocked() {
	close(s.changedLocked())
	s.changed = make(chan struct{})
}

// set records that the agent is (or no longer is) down for reason.
func (s *agentSwitch) set(reason string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down[reason] == down {
		return
	}
	if s.down == nil {
		s.down = map[string]bool{}
	}
	if down {
		s.down[reason] = true
	} else {
		delete(s.down, reason)
	}
	s.notifyLocked()
}

// wanted says whether the agent may run and why not, with a channel closed on the next change.
func (s *agentSwitch) wanted() (up bool, why string, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.down) == 0, strings.Join(slices.Sorted(maps.Keys(s.down)), ", "), s.changedLocked()
}

func (s *agentSwitch) setRunning(running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != running {
		s.running = running
		s.notifyLocked()
	}
}

// waitStopped waits until the agent's manager has stopped (at once when it does not run),
// at most timeout; it reports whether it has.
func (s *agentSwitch) waitStopped(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		running, changed := s.running, s.changedLocked()
		s.mu.Unlock()
		if !running {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		}
	}
}

// agentRunner runs a node's gpupool agent while its agentSwitch allows it: it stops the
// agent's manager when the host reboots or the agent-down fault is set, and starts a new one
// (as the DaemonSet's new pod) when it may run again. A stopped agent publishes nothing, so
// its GPUNode's status.observedTime stops advancing and a deleted GPUNode is not recreated.
type agentRunner struct {
	node *Node
	// build makes a fresh agent manager; a controller-runtime manager cannot start twice.
	build func() (manager.Manager, error)
	// first is the manager New built, to report a bad option before anything runs.
	first manager.Manager
	// client finds the Node an Event is about; recorder records it.
	client   client.Client
	recorder events.EventRecorder
	log      logr.Logger
}

// Start runs the agent, stopping and starting it as the switch says, until ctx ends. An agent
// that fails on its own ends the simulator, as before agents could be stopped.
func (a *agentRunner) Start(ctx context.Context) error {
	next, restarted := a.first, false
	for {
		up, _, changed := a.node.agentState.wanted()
		if !up {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		if next == nil {
			m, err := a.build()
			if err != nil {
				return err
			}
			next = m
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func(m manager.Manager) { done <- m.Start(runCtx) }(next)
		next = nil
		a.node.agentState.setRunning(true)
		if restarted {
			a.event(ctx, corev1.EventTypeNormal, reasonAgentStarted, "gpupool agent on node %s started again", a.node.name)
		}
		why, ended, err := a.runUntilDown(ctx, changed, done)
		stop()
		if !ended {
			err = <-done
		}
		a.node.agentState.setRunning(false)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil || why == "":
			// The agent's manager ended on its own.
			return err
		}
		a.log.Info("stopped the node's agent", "node", a.node.name, "reason", why)
		a.event(ctx, corev1.EventTypeWarning, reasonAgentStopped, "gpupool agent on node %s stopped: %s", a.node.name, why)
		restarted = true
	}
}

// runUntilDown waits while the agent runs and may: it returns why it must stop ("" when ctx
// ended, or the manager returned by itself: then ended is true, with its error).
func (a *agentRunner) runUntilDown(ctx context.Context, changed <-chan struct{}, done <-chan error) (why string, ended bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return "", false, nil
		case err := <-done:
			return "", true, err
		case <-changed:
			up, reason, next := a.node.agentState.wanted()
			if !up {
				return reason, false, nil
			}
			changed = next
		}
	}
}

func (a *agentRunner) event(ctx context.Context, eventType, reason, format string, args ...any) {
	node := &corev1.Node{}
	if err := a.client.Get(ctx, types.NamespacedName{Name: a.node.name}, node); err != nil {
		a.log.Info("cannot record an Event on the node", "node", a.node.name, "reason", reason, "error", err.Error())
		return
	}
	a.recorder.Eventf(node, nil, eventType, reason, "RunAgent", format, args...)
}

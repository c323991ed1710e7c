package sim

import (
	"context"
	"testing"
	"time"
)

// Fault annotations parse to the knobs they document; unknown words and bad durations are
// errors so that a typo cannot silently disable a fault test.
func TestParseFaultAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    Faults
		wantErr bool
	}{
		{name: "none", ann: nil, want: Faults{}},
		{name: "fail-next", ann: map[string]string{AnnotationFault: "fail-next"}, want: Faults{FailNext: true}},
		{name: "list with spaces", ann: map[string]string{AnnotationFault: "stuck-pending, wrong-layout"}, want: Faults{StuckPending: true, WrongLayout: true}},
		{name: "delay", ann: map[string]string{AnnotationApplyDelay: "5s"}, want: Faults{ApplyDelay: 5 * time.Second}},
		{name: "fail-always", ann: map[string]string{AnnotationFault: "fail-always"}, want: Faults{FailAlways: true}},
		{name: "reboot with its duration", ann: map[string]string{AnnotationFault: "reboot", AnnotationRebootDuration: "3s"},
			want: Faults{Reboot: true, RebootDuration: 3 * time.Second}},
		{name: "plugin-silent and agent-down", ann: map[string]string{AnnotationFault: "plugin-silent,agent-down"},
			want: Faults{PluginSilent: true, AgentDown: true}},
		{name: "bad reboot duration", ann: map[string]string{AnnotationRebootDuration: "a while"}, wantErr: true},
		{name: "unknown fault", ann: map[string]string{AnnotationFault: "explode"}, wantErr: true},
		{name: "bad delay", ann: map[string]string{AnnotationApplyDelay: "soon"}, wantErr: true},
		{name: "negative delay", ann: map[string]string{AnnotationApplyDelay: "-1s"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFaultAnnotations(tc.ann)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseFaultAnnotations(%v) error %v, want error %v", tc.ann, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseFaultAnnotations(%v) = %+v, want %+v", tc.ann, got, tc.want)
			}
		})
	}
}

// Consuming fail-next removes only that word, so other faults in the list stay on.
func TestWithoutFault(t *testing.T) {
	for in, want := range map[string]string{
		"fail-next":                  "",
		"fail-next,wrong-layout":     "wrong-layout",
		"wrong-layout, fail-next":    "wrong-layout",
		"stuck-pending,wrong-layout": "stuck-pending,wrong-layout",
	} {
		if got := withoutFault(in, FaultFailNext); got != want {
			t.Errorf("withoutFault(%q) = %q, want %q", in, got, want)
		}
	}
}

// Programmatic and annotated knobs add up; the longer delay wins.
func TestFaultsMerge(t *testing.T) {
	got := Faults{FailNext: true, ApplyDelay: time.Second, Reboot: true, RebootDuration: time.Second}.merge(
		Faults{WrongLayout: true, ApplyDelay: time.Minute, PluginSilent: true, AgentDown: true, FailAlways: true, RebootDuration: time.Minute})
	want := Faults{FailNext: true, WrongLayout: true, ApplyDelay: time.Minute, Reboot: true, RebootDuration: time.Minute,
		PluginSilent: true, AgentDown: true, FailAlways: true}
	if got != want {
		t.Errorf("merge = %+v, want %+v", got, want)
	}
}

// A reboot lasts DefaultRebootDuration unless a duration is given.
func TestRebootDuration(t *testing.T) {
	if got := (Faults{Reboot: true}).rebootDuration(); got != DefaultRebootDuration {
		t.Errorf("default reboot duration = %s, want %s", got, DefaultRebootDuration)
	}
	if got := (Faults{Reboot: true, RebootDuration: time.Second}).rebootDuration(); got != time.Second {
		t.Errorf("reboot duration = %s, want 1s", got)
	}
}

// The agent switch runs the agent only while no reason holds it down, tells its runner of
// every change, and waitStopped returns once the runner says the agent stopped.
func TestAgentSwitch(t *testing.T) {
	var s agentSwitch
	up, _, changed := s.wanted()
	if !up {
		t.Fatal("a new switch holds the agent down")
	}
	s.set(agentDownReboot, true)
	select {
	case <-changed:
	default:
		t.Fatal("setting a reason did not signal a change")
	}
	s.set(agentDownFault, true)
	up, why, _ := s.wanted()
	if up || why != agentDownFault+", "+agentDownReboot {
		t.Errorf("wanted() = %v, %q; want down for both reasons", up, why)
	}
	s.set(agentDownReboot, false)
	if up, _, _ := s.wanted(); up {
		t.Error("the agent may run while agent-down still holds it")
	}
	s.set(agentDownFault, false)
	if up, _, _ := s.wanted(); !up {
		t.Error("the agent may not run with no reason left")
	}

	if !s.waitStopped(context.Background(), time.Millisecond) {
		t.Error("waitStopped waits for an agent that does not run")
	}
	s.setRunning(true)
	if s.waitStopped(context.Background(), 10*time.Millisecond) {
		t.Error("waitStopped returned while the agent runs")
	}
	// Stopped from another goroutine while (or just before) waitStopped waits.
	go s.setRunning(false)
	if !s.waitStopped(context.Background(), 10*time.Second) {
		t.Error("waitStopped did not see the agent stop")
	}
}

package pool

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones from the binary: a window means the same in any image, with or without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Bounds of a maintenance window's duration; the CRD's CEL rule on
// spec.disruption.windows[].duration spells the same, and a test checks that the two agree.
const (
	MinWindowDuration = time.Minute
	MaxWindowDuration = 168 * time.Hour
)

// windowParser reads the standard five cron fields or a descriptor such as @daily, as
// Kubernetes CronJobs and karpenter's disruption budgets do (cron.ParseStandard).
var windowParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// referenceStart is where the check for a schedule that never fires looks from: the cron
// library searches five years ahead, which holds a leap day whatever the start.
var referenceStart = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// Window is one maintenance window, parsed: it opens at each time Schedule names and stays
// open for Duration.
type Window struct {
	// Spec is the window as the policy writes it, for messages.
	Spec     v1alpha1.MaintenanceWindow
	schedule cron.Schedule
}

// Windows are a policy's maintenance windows. None means no restriction: a step that evicts
// pods may start at any time.
type Windows []Window

// ParseWindow reads one window; the error says what is wrong and what to write instead. It
// never panics, whatever the input.
func ParseWindow(w v1alpha1.MaintenanceWindow) (win Window, err error) {
	spec := strings.TrimSpace(w.Schedule)
	switch {
	case spec == "":
		return Window{}, errors.New("schedule is empty: write a cron schedule such as \"0 2 * * 6\" (02:00 every Saturday)")
	case strings.Contains(spec, "TZ="):
		return Window{}, fmt.Errorf("schedule %q sets a time zone: remove the TZ= or CRON_TZ= prefix and set timeZone instead", w.Schedule)
	case strings.HasPrefix(spec, "@every"):
		return Window{}, fmt.Errorf("schedule %q is not anchored to the clock: name the times the window opens, such as \"0 */6 * * *\"", w.Schedule)
	}
	if d := w.Duration.Duration; d < MinWindowDuration || d > MaxWindowDuration {
		return Window{}, fmt.Errorf("duration %s is outside %s..%s: set a duration in that range", d, MinWindowDuration, MaxWindowDuration)
	}
	loc, err := windowLocation(w.TimeZone)
	if err != nil {
		return Window{}, err
	}
	defer func() {
		// The cron library is another project's parser: a panic on some input it was not
		// written for must not take the manager down, and the input is the policy's to fix.
		if r := recover(); r != nil {
			win, err = Window{}, fmt.Errorf("schedule %q cannot be parsed (%v): write five cron fields, such as \"0 2 * * 6\"", w.Schedule, r)
		}
	}()
	sched, err := windowParser.Parse(spec)
	if err != nil {
		return Window{}, fmt.Errorf("schedule %q cannot be parsed (%w): write five cron fields (minute hour day-of-month month day-of-week), such as \"0 2 * * 6\"", w.Schedule, err)
	}
	spec2, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return Window{}, fmt.Errorf("schedule %q is not anchored to the clock: name the times the window opens, such as \"0 */6 * * *\"", w.Schedule)
	}
	spec2.Location = loc
	if spec2.Next(referenceStart).IsZero() {
		return Window{}, fmt.Errorf("schedule %q never fires (no such date): check its day of month and month", w.Schedule)
	}
	return Window{Spec: w, schedule: spec2}, nil
}

// windowLocation is the time zone a window's schedule is read in: UTC unless it names one.
func windowLocation(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if name == "Local" {
		// time.LoadLocation reads it as the manager's own zone, which the policy cannot know.
		return nil, errors.New("timeZone Local is the manager's own time zone: name an IANA zone such as Europe/Berlin, or leave it empty for UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timeZone %q is not a known IANA time zone (%w): name one such as Europe/Berlin or America/New_York, or leave it empty for UTC", name, err)
	}
	return loc, nil
}

// ParseWindows reads a policy's windows; the first error names the window it is in.
func ParseWindows(ws []v1alpha1.MaintenanceWindow) (Windows, error) {
	out := make(Windows, 0, len(ws))
	for i, w := range ws {
		win, err := ParseWindow(w)
		if err != nil {
			return nil, fmt.Errorf("spec.disruption.windows[%d]: %w", i, err)
		}
		out = append(out, win)
	}
	return out, nil
}

// WindowProblems lists every window the controller cannot use. They block planning: the policy
// asked to restrict disruption to windows the controller cannot read, and a plan made now
// could never start its evicting steps.
func WindowProblems(spec *v1alpha1.GPUPoolPolicySpec) []Problem {
	var out []Problem
	for i, w := range spec.Disruption.Windows {
		if _, err := ParseWindow(w); err != nil {
			out = append(out, Problem{Field: fmt.Sprintf("spec.disruption.windows[%d]", i), Message: err.Error(), Blocking: true})
		}
	}
	return out
}

// Open reports whether a window is open at t: a start at or before t, less than its
// duration ago. The window is [start, start+duration).
func (w Window) Open(t time.Time) bool {
	// The first start after t-duration is the only one whose window can still hold t; the
	// cron library returns the first start strictly after the time it is given (karpenter's
	// Budget.IsActive reads a schedule the same way).
	next := w.schedule.Next(t.Add(-w.Spec.Duration.Duration))
	return !next.IsZero() && !next.After(t)
}

// Next is the window's first start after t (zero when it never starts again).
func (w Window) Next(t time.Time) time.Time { return w.schedule.Next(t) }

// Open reports whether evicting steps may start at t: always without windows, else while one
// of them is open.
func (ws Windows) Open(t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if w.Open(t) {
			return true
		}
	}
	return false
}

// NextOpen is when evicting steps may start next at or after t: t itself when a window is
// open, else the earliest start of any window, with that window. ok is false when no window
// ever opens again.
func (ws Windows) NextOpen(t time.Time) (at time.Time, which Window, ok bool) {
	if ws.Open(t) {
		for _, w := range ws {
			if w.Open(t) {
				return t, w, true
			}
		}
		return t, Window{}, true
	}
	for _, w := range ws {
		if n := w.Next(t); !n.IsZero() && (!ok || n.Before(at)) {
			at, which, ok = n, w, true
		}
	}
	return at, which, ok
}

// Describe names the window for messages, e.g. `"0 2 * * 6" for 4h (Europe/Berlin)`.
func (w Window) Describe() string {
	tz := w.Spec.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%q for %s (%s)", w.Spec.Schedule, w.Spec.Duration.Duration, tz)
}

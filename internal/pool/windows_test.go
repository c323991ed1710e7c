package pool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func win(schedule, duration, tz string) v1alpha1.MaintenanceWindow {
	d, err := time.ParseDuration(duration)
	if err != nil {
		panic(err)
	}
	return v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestWindowsOpen guards the window arithmetic: [start, start+duration) in the window's zone,
// the next start when closed, and no restriction without windows.
func TestWindowsOpen(t *testing.T) {
	saturday2am := win("0 2 * * 6", "4h", "") // 2026-03-07 is a Saturday
	cases := []struct {
		name     string
		windows  []v1alpha1.MaintenanceWindow
		now      string
		open     bool
		nextOpen string // "" when no window opens again
	}{
		{"no windows: always open", nil, "2026-03-04T13:37:00Z", true, "2026-03-04T13:37:00Z"},
		{"before the window: closed, opens at its start", []v1alpha1.MaintenanceWindow{saturday2am},
			"2026-03-07T01:59:59Z", false, "2026-03-07T02:00:00Z"},
		{"at its start: open", []v1alpha1.MaintenanceWindow{saturday2am}, "2026-03-07T02:00:00Z", true, "2026-03-07T02:00:00Z"},
		{"inside: open", []v1alpha1.MaintenanceWindow{saturday2am}, "2026-03-07T05:59:59Z", true, "2026-03-07T05:59:59Z"},
		{"at its end: closed, opens next week", []v1alpha1.MaintenanceWindow{saturday2am},
			"2026-03-07T06:00:00Z", false, "2026-03-14T02:00:00Z"},
		{"midweek: closed", []v1alpha1.MaintenanceWindow{saturday2am}, "2026-03-04T13:37:00Z", false, "2026-03-07T02:00:00Z"},
		{"a window across midnight is open the next morning", []v1alpha1.MaintenanceWindow{win("0 22 * * *", "4h", "")},
			"2026-03-05T01:30:00Z", true, "2026-03-05T01:30:00Z"},
		{"the earliest of two windows opens first", []v1alpha1.MaintenanceWindow{saturday2am, win("30 14 * * 3", "1h", "")},
			"2026-03-04T13:37:00Z", false, "2026-03-04T14:30:00Z"},
		{"one open window of two is enough", []v1alpha1.MaintenanceWindow{saturday2am, win("30 13 * * 3", "1h", "")},
			"2026-03-04T13:37:00Z", true, "2026-03-04T13:37:00Z"},
		{"a window longer than its period is always open", []v1alpha1.MaintenanceWindow{win("@hourly", "90m", "")},
			"2026-03-04T13:37:00Z", true, "2026-03-04T13:37:00Z"},
		{"a descriptor: @daily opens at midnight UTC", []v1alpha1.MaintenanceWindow{win("@daily", "1h", "")},
			"2026-03-04T13:37:00Z", false, "2026-03-05T00:00:00Z"},
		{"a time zone moves the window: 02:00 in Berlin is 01:00 UTC in winter", []v1alpha1.MaintenanceWindow{win("0 2 * * *", "1h", "Europe/Berlin")},
			"2026-03-04T01:30:00Z", true, "2026-03-04T01:30:00Z"},
		{"and 00:00 UTC in summer", []v1alpha1.MaintenanceWindow{win("0 2 * * *", "1h", "Europe/Berlin")},
			"2026-07-04T00:30:00Z", true, "2026-07-04T00:30:00Z"},
		{"a start in the hour daylight saving time skips is skipped", []v1alpha1.MaintenanceWindow{win("30 2 * * *", "30m", "Europe/Berlin")},
			"2026-03-29T00:00:00Z", false, "2026-03-30T00:30:00Z"},
		{"a leap day only: the next one is years away", []v1alpha1.MaintenanceWindow{win("0 0 29 2 *", "24h", "")},
			"2026-03-04T13:37:00Z", false, "2028-02-29T00:00:00Z"},
		{"the time given in another zone reads the same", []v1alpha1.MaintenanceWindow{saturday2am},
			"2026-03-07T03:00:00+01:00", true, "2026-03-07T03:00:00+01:00"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, err := ParseWindows(c.windows)
			if err != nil {
				t.Fatalf("ParseWindows: %v", err)
			}
			now := at(c.now)
			if got := ws.Open(now); got != c.open {
				t.Errorf("Open(%s) = %v, want %v", c.now, got, c.open)
			}
			next, _, ok := ws.NextOpen(now)
			if ok != (c.nextOpen != "") || (ok && !next.Equal(at(c.nextOpen))) {
				t.Errorf("NextOpen(%s) = %s, %v; want %q", c.now, next.UTC().Format(time.RFC3339), ok, c.nextOpen)
			}
			if ok && !ws.Open(next) {
				t.Errorf("NextOpen(%s) = %s, where no window is open", c.now, next.UTC().Format(time.RFC3339))
			}
		})
	}
}

// TestWindowDaylightSavingRepeat pins what a start in the hour that daylight saving time
// repeats does: the cron library fires at both 02:30s, an hour apart, so the window is open
// in each. Documented for users in docs/maintenance-windows.md.
func TestWindowDaylightSavingRepeat(t *testing.T) {
	ws, err := ParseWindows([]v1alpha1.MaintenanceWindow{win("30 2 * * *", "10m", "Europe/Berlin")})
	if err != nil {
		t.Fatal(err)
	}
	// 2026-10-25: 02:30 CEST is 00:30 UTC, 02:30 CET is 01:30 UTC.
	for _, s := range []string{"2026-10-25T00:35:00Z", "2026-10-25T01:35:00Z"} {
		if !ws.Open(at(s)) {
			t.Errorf("closed at %s, an occurrence of 02:30 Europe/Berlin", s)
		}
	}
	if ws.Open(at("2026-10-25T01:00:00Z")) {
		t.Error("open between the two 02:30s")
	}
}

// TestParseWindowRefuses guards the controller's checks the CRD's cannot make: each bad window
// is an error that says what to write instead, and a blocking problem of the policy.
func TestParseWindowRefuses(t *testing.T) {
	cases := []struct {
		name   string
		window v1alpha1.MaintenanceWindow
		want   string
	}{
		{"empty schedule", win(" ", "1h", ""), "schedule is empty"},
		{"six fields", win("0 0 2 * * 6", "1h", ""), "cannot be parsed"},
		{"minute out of range", win("61 2 * * *", "1h", ""), "cannot be parsed"},
		{"unknown descriptor", win("@fortnightly", "1h", ""), "cannot be parsed"},
		{"@every is not anchored", win("@every 6h", "1h", ""), "not anchored"},
		{"CRON_TZ prefix", win("CRON_TZ=Europe/Berlin 0 2 * * *", "1h", ""), "set timeZone instead"},
		{"TZ prefix alone (the cron library would panic on it)", win("TZ=UTC", "1h", ""), "set timeZone instead"},
		{"a date that never comes", win("0 0 30 2 *", "1h", ""), "never fires"},
		{"too short", win("0 2 * * *", "30s", ""), "outside 1m0s..168h0m0s"},
		{"too long", win("0 2 * * *", "169h", ""), "outside 1m0s..168h0m0s"},
		{"unknown time zone", win("0 2 * * *", "1h", "Mars/Olympus"), "not a known IANA time zone"},
		{"the manager's own zone", win("0 2 * * *", "1h", "Local"), "manager's own time zone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseWindow(c.window)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseWindow(%+v) = %v, want an error containing %q", c.window, err, c.want)
			}
			spec := &v1alpha1.GPUPoolPolicySpec{NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}}}
			spec.Disruption.Windows = []v1alpha1.MaintenanceWindow{win("0 2 * * *", "1h", ""), c.window}
			problems := Problems(spec)
			if len(problems) == 0 || !problems[0].Blocking || problems[0].Field != "spec.disruption.windows[1]" {
				t.Fatalf("Problems = %v, want a blocking problem in spec.disruption.windows[1]", problems)
			}
		})
	}
}

// FuzzParseWindow: whatever a policy holds, parsing returns a window or an error, never
// panics, and a window it returns opens again.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"0 2 * * 6", "@daily", "TZ=", "CRON_TZ=UTC", "*/0 * * * *", "0-59/61 * * * *",
		"0 0 31 4 *", "5-1 * * * *", "@every 1h", "0 0 * * MON-FRI", "? ? ? ? ?", "1,2,,3 * * * *"} {
		f.Add(s, int64(time.Hour), "")
	}
	f.Add("0 2 * * *", int64(time.Hour), "Europe/Berlin")
	f.Add("0 2 * * *", int64(time.Hour), "../../etc/passwd")
	f.Fuzz(func(t *testing.T, schedule string, d int64, tz string) {
		w, err := ParseWindow(v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: time.Duration(d)}, TimeZone: tz})
		if err != nil {
			return
		}
		start := at("2026-03-04T13:37:00Z")
		next := w.Next(start)
		if next.IsZero() {
			// Five years from referenceStart hold every date a schedule can name, so one that
			// parses fires again within five years of any time.
			t.Fatalf("window %q parsed but never opens after %s", schedule, start)
		}
		if !w.Open(next) {
			t.Fatalf("window %q closed at its own start %s", schedule, next)
		}
	})
}

package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/metrics"
)

// TestMonitoringPageListsEveryMetric holds docs/monitoring.md's hand-written metrics table,
// which says more than the help texts of the generated reference, to what the manager
// exports: every metric with its type and labels, and none that it does not export.
func TestMonitoringPageListsEveryMetric(t *testing.T) {
	page, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(gpupool_[a-z_]+)` \\| ([a-z]+) \\| ([a-z, ]*) \\|")
	documented := map[string][]string{}
	for _, line := range strings.Split(string(page), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = []string{m[2], m[3]}
		}
	}
	for _, s := range metrics.Exported() {
		got, ok := documented[s.Name]
		if !ok {
			t.Errorf("docs/monitoring.md's metrics table lacks %s (%s; labels %s)", s.Name, s.Type, strings.Join(s.Labels, ", "))
			continue
		}
		delete(documented, s.Name)
		if got[0] != s.Type {
			t.Errorf("docs/monitoring.md says %s is a %s; it is a %s", s.Name, got[0], s.Type)
		}
		labels := strings.Split(got[1], ", ")
		if got[1] == "" {
			labels = nil
		}
		if !slices.Equal(labels, s.Labels) {
			t.Errorf("docs/monitoring.md gives %s the labels %q; it has %q", s.Name, labels, s.Labels)
		}
	}
	for name := range documented {
		t.Errorf("docs/monitoring.md lists %s, which the manager does not export", name)
	}
}

package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpupool/gpupool/internal/metrics"
)

// The rule files: the chart's canonical one and the kustomize install's copy.
const (
	chartRules  = "charts/gpupool/files/prometheus-rules.yaml"
	configRules = "config/prometheus/alerts.yaml"
	rulesTests  = "testdata/alerts_test.yaml"
)

// TestRuleFilesAreOneSource: config/prometheus/alerts.yaml is the chart's file, byte for byte
// (`make manifests` copies it).
func TestRuleFilesAreOneSource(t *testing.T) {
	root := repoRoot(t)
	a, errA := os.ReadFile(filepath.Join(root, chartRules))
	b, errB := os.ReadFile(filepath.Join(root, configRules))
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s (%v, %v): run make manifests", configRules, chartRules, errA, errB)
	}
}

// TestAlertRulesUseExportedNames: every rule parses as Prometheus loads it, names only
// exported metrics and labels, carries a severity and a summary, description and runbook, and
// its annotations read only labels its expression's result carries.
func TestAlertRulesUseExportedNames(t *testing.T) {
	catalog := NewCatalog(metrics.Exported())
	groups, err := ParseRuleFile(filepath.Join(repoRoot(t), chartRules))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.Groups) != 1 || groups.Groups[0].Name != "gpupool" {
		t.Fatalf("want one group named gpupool, got %d groups", len(groups.Groups))
	}
	for _, r := range groups.Groups[0].Rules {
		if r.Alert == "" {
			t.Errorf("recording rule %s: the file holds alerts only", r.Record)
			continue
		}
		have, err := catalog.Check(r.Expr)
		if err != nil {
			t.Errorf("alert %s: %v", r.Alert, err)
			continue
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		for name, text := range r.Annotations {
			if missing := missingLabels(templateLabels, text, have); len(missing) > 0 {
				t.Errorf("alert %s: annotation %s reads $labels %v, which its expression's result does not carry (it has %v)",
					r.Alert, name, missing, have)
			}
		}
	}
}

// TestAlertRules runs testdata/alerts_test.yaml, promtool's rule unit test format, on the
// chart's rule file, and checks that it fires and spares every alert at least once.
func TestAlertRules(t *testing.T) {
	f, err := ReadRuleTestFile(rulesTests)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(repoRoot(t), chartRules)
	for _, rf := range f.RuleFiles {
		if abs, _ := filepath.Abs(rf); abs != want {
			t.Errorf("%s loads %s, want the chart's own %s", rulesTests, rf, chartRules)
		}
	}
	for _, tg := range f.Tests {
		t.Run(tg.Name, func(t *testing.T) {
			for _, err := range f.Run(tg) {
				t.Error(err)
			}
		})
	}

	groups, err := ParseRuleFile(want)
	if err != nil {
		t.Fatal(err)
	}
	fires, spared := map[string]bool{}, map[string]bool{}
	for _, tg := range f.Tests {
		for _, at := range tg.AlertRuleTests {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				spared[at.Alertname] = true
			}
		}
	}
	for _, r := range groups.Groups[0].Rules {
		if !fires[r.Alert] || !spared[r.Alert] {
			t.Errorf("alert %s: %s needs a case where it fires (%v) and one where it does not (%v)", r.Alert, rulesTests, fires[r.Alert], spared[r.Alert])
		}
	}
}

// TestRuleRunnerFailsWrongExpectations: the runner reports an alert that fires unexpectedly,
// one that does not fire, wrong annotations and a wrong query result, so a passing
// TestAlertRules means something.
func TestRuleRunnerFailsWrongExpectations(t *testing.T) {
	f := &RuleTestFile{RuleFiles: []string{filepath.Join(repoRoot(t), chartRules)}, EvaluationInterval: minute}
	input := []InputSeries{{Series: `gpupool_unreported_nodes{policy="p"}`, Values: "1x30"}}
	firing := ExpectedAlert{ExpLabels: map[string]string{"policy": "p", "severity": "warning"}}
	for name, tg := range map[string]RuleTestGroup{
		"fires unexpectedly": {Interval: minute, InputSeries: input,
			AlertRuleTests: []AlertRuleTest{{EvalTime: 20 * minute, Alertname: "GPUPoolAgentReportStale"}}},
		"does not fire": {Interval: minute, InputSeries: input,
			AlertRuleTests: []AlertRuleTest{{EvalTime: 5 * minute, Alertname: "GPUPoolAgentReportStale", ExpAlerts: []ExpectedAlert{firing}}}},
		"wrong annotations": {Interval: minute, InputSeries: input,
			AlertRuleTests: []AlertRuleTest{{EvalTime: 20 * minute, Alertname: "GPUPoolAgentReportStale", ExpAlerts: []ExpectedAlert{firing}}}},
		"no such alert": {Interval: minute, InputSeries: input,
			AlertRuleTests: []AlertRuleTest{{EvalTime: 20 * minute, Alertname: "GPUPoolAgentReportStal"}}},
		"wrong query result": {Interval: minute, InputSeries: input,
			PromQLExprTests: []PromQLExprTest{{Expr: "gpupool_unreported_nodes", EvalTime: 5 * minute,
				ExpSamples: []ExpectedSample{{Labels: `gpupool_unreported_nodes{policy="p"}`, Value: 2}}}}},
	} {
		if errs := f.Run(tg); len(errs) == 0 {
			t.Errorf("%s: the runner reported no failure", name)
		} else {
			t.Logf("%s: %v", name, fmt.Sprint(errs))
		}
	}
}

const minute = model.Duration(time.Minute)

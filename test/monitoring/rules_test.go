package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
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
// exported metrics and labels, carries a severity and a summary, description and runbook_url
// (its section of docs/operate.md), and
// its annotations read only labels its expression's result carries.
func TestAlertRulesUseExportedNames(t *testing.T) {
	catalog := ManagerCatalog()
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
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		if _, ok := r.Annotations["runbook"]; ok {
			t.Errorf("alert %s has a free-text runbook annotation: put the steps in %s and link them with runbook_url", r.Alert, operateDoc)
		}
		if got, want := r.Annotations["runbook_url"], runbookURL(r.Alert); got != want {
			t.Errorf("alert %s: runbook_url %q, want %q (its section of %s)", r.Alert, got, want, operateDoc)
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

// operateDoc holds the runbooks; runbookBase is where it is published (the repository's docs).
const (
	operateDoc  = "docs/operate.md"
	runbookBase = "https://github.com/gpupool/gpupool/blob/main/" + operateDoc
)

// runbookURL is an alert's runbook: its section of docs/operate.md, a heading named after the
// alert, whose anchor GitHub makes by lowercasing it.
func runbookURL(alert string) string { return runbookBase + "#" + strings.ToLower(alert) }

// markdownSections splits a Markdown document at its "## " headings: heading text -> body.
func markdownSections(doc string) map[string]string {
	out := map[string]string{}
	var heading string
	var body strings.Builder
	flush := func() {
		if heading != "" {
			out[heading] = body.String()
		}
		body.Reset()
	}
	inFence := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if h, ok := strings.CutPrefix(line, "## "); ok && !inFence {
			flush()
			heading = strings.TrimSpace(h)
			continue
		}
		body.WriteString(line + "\n")
	}
	flush()
	return out
}

// TestRunbooksExist: docs/operate.md has a section per alert, the anchor its runbook_url
// names, saying what the alert means, how to confirm it and what to do; and its commands
// avoid the two mistakes an earlier runbook made: kubectl logs with --field-selector (a flag
// kubectl logs does not have) and the operator's namespace written out (installs differ; the
// reader sets NS).
func TestRunbooksExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), operateDoc))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	sections := markdownSections(doc)
	groups, err := ParseRuleFile(filepath.Join(repoRoot(t), chartRules))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, r := range groups.Groups[0].Rules {
		alerts[r.Alert] = true
		body, ok := sections[r.Alert]
		if !ok {
			t.Errorf("%s has no section \"## %s\" (the anchor of %s)", operateDoc, r.Alert, runbookURL(r.Alert))
			continue
		}
		for _, part := range []string{"**Meaning.**", "**Confirm.**", "**Act.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("%s, section %s: no %s paragraph", operateDoc, r.Alert, part)
			}
		}
	}
	for heading := range sections {
		if strings.HasPrefix(heading, "GPUPool") && !alerts[heading] {
			t.Errorf("%s has a section for %s, which is no alert of %s", operateDoc, heading, chartRules)
		}
	}
	for i, line := range strings.Split(doc, "\n") {
		if logsWithFieldSelector.MatchString(line) {
			t.Errorf("%s:%d: kubectl logs has no --field-selector (find the pod with kubectl get pods --field-selector first): %s", operateDoc, i+1, line)
		}
		if strings.Contains(line, "-n gpupool-system") || strings.Contains(line, "--namespace gpupool-system") {
			t.Errorf("%s:%d: the manager's namespace is the reader's (\"$NS\"), not gpupool-system: %s", operateDoc, i+1, line)
		}
	}
}

// logsWithFieldSelector matches a kubectl logs command line that passes --field-selector.
var logsWithFieldSelector = regexp.MustCompile(`kubectl\b[^|;&]*\blogs\b[^|;&]*--field-selector`)

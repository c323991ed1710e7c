package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v3"
)

// RuleFile returns the Prometheus rule file inside a Prometheus Operator PrometheusRule
// manifest: its spec, which is a rule file's {groups: [...]}.
func RuleFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj struct {
		APIVersion string    `yaml:"apiVersion"`
		Kind       string    `yaml:"kind"`
		Spec       yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("%s holds a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", path, obj.APIVersion, obj.Kind)
	}
	spec, err := yaml.Marshal(&obj.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: spec: %w", path, err)
	}
	return spec, nil
}

// ParseRuleFile reads a PrometheusRule's spec and validates it as Prometheus does when it loads
// a rule file (unknown fields refused, expressions and annotation templates parsed).
func ParseRuleFile(path string) (*rulefmt.RuleGroups, error) {
	spec, err := RuleFile(path)
	if err != nil {
		return nil, err
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promQL, promslog.NewNopLogger())
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.Join(errs...))
	}
	return groups, nil
}

// prometheusRuleLoader is a rules.GroupLoader for PrometheusRule manifests, so that the rule
// manager loads the very file the chart and config/prometheus ship.
type prometheusRuleLoader struct{}

func (prometheusRuleLoader) Load(path string, _ bool, _ model.ValidationScheme) (*rulefmt.RuleGroups, []error) {
	groups, err := ParseRuleFile(path)
	if err != nil {
		return nil, []error{err}
	}
	return groups, nil
}

func (prometheusRuleLoader) Parse(query string) (parser.Expr, error) { return promQL.ParseExpr(query) }

// RuleTestFile is promtool's rule unit test file (`promtool test rules`), the parts gpupool's
// tests use; the rule files are PrometheusRule manifests, relative to the test file.
type RuleTestFile struct {
	RuleFiles          []string        `yaml:"rule_files"`
	EvaluationInterval model.Duration  `yaml:"evaluation_interval"`
	Tests              []RuleTestGroup `yaml:"tests"`
}

// RuleTestGroup is one test: input series, and the alerts and query results expected from them.
type RuleTestGroup struct {
	Name            string           `yaml:"name"`
	Interval        model.Duration   `yaml:"interval"`
	InputSeries     []InputSeries    `yaml:"input_series"`
	AlertRuleTests  []AlertRuleTest  `yaml:"alert_rule_test"`
	PromQLExprTests []PromQLExprTest `yaml:"promql_expr_test"`
}

// InputSeries is a series and its values in promtool's expanding notation ("0+1x10", "1x20").
type InputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

// AlertRuleTest lists the alerts of one name expected to fire at eval_time; none means none.
type AlertRuleTest struct {
	EvalTime  model.Duration  `yaml:"eval_time"`
	Alertname string          `yaml:"alertname"`
	ExpAlerts []ExpectedAlert `yaml:"exp_alerts"`
}

// ExpectedAlert is a firing alert's labels (less alertname) and annotations.
type ExpectedAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// PromQLExprTest is an instant query at eval_time and the samples it must return.
type PromQLExprTest struct {
	Expr       string           `yaml:"expr"`
	EvalTime   model.Duration   `yaml:"eval_time"`
	ExpSamples []ExpectedSample `yaml:"exp_samples"`
}

// ExpectedSample is a sample as promtool writes it: labels in series notation and a value.
type ExpectedSample struct {
	Labels string  `yaml:"labels"`
	Value  float64 `yaml:"value"`
}

// ReadRuleTestFile reads a test file strictly (a misspelt key fails) and resolves its rule files.
func ReadRuleTestFile(path string) (*RuleTestFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	f := &RuleTestFile{}
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, rf := range f.RuleFiles {
		if !filepath.IsAbs(rf) {
			f.RuleFiles[i] = filepath.Join(filepath.Dir(path), rf)
		}
	}
	if f.EvaluationInterval == 0 {
		f.EvaluationInterval = model.Duration(time.Minute)
	}
	return f, nil
}

// Run evaluates the rule files' groups over tg's input series from time 0 to the last
// eval_time, one evaluation_interval at a time, as promtool does: at each eval_time the firing
// alerts of each tested name must be exactly the expected ones, and after the last evaluation
// each query must return exactly the expected samples.
func (f *RuleTestFile) Run(tg RuleTestGroup) (failures []error) {
	evalInterval := time.Duration(f.EvaluationInterval)
	var load bytes.Buffer
	fmt.Fprintf(&load, "load %s\n", time.Duration(tg.Interval))
	for _, s := range tg.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		return []error{fmt.Errorf("input series: %w", err)}
	}
	defer func() {
		if err := suite.Close(); err != nil {
			failures = append(failures, fmt.Errorf("closing the test storage: %w", err))
		}
	}()
	suite.SubqueryInterval = evalInterval

	manager := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:   rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		Appendable:  suite.Storage(),
		Context:     suite.Context(),
		NotifyFunc:  func(context.Context, string, ...*rules.Alert) {},
		Logger:      promslog.NewNopLogger(),
		GroupLoader: prometheusRuleLoader{},
	})
	loaded, errs := manager.LoadGroups(time.Duration(tg.Interval), labels.EmptyLabels(), "", nil, false, f.RuleFiles...)
	if errs != nil {
		return errs
	}
	var groups []*rules.Group
	for _, g := range loaded {
		groups = append(groups, g)
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				// As after a restart with nothing to restore: alerts start pending now.
				ar.SetRestored(true)
			}
		}
	}
	slices.SortFunc(groups, func(a, b *rules.Group) int { return strings.Compare(a.Name(), b.Name()) })

	var last model.Duration
	for _, a := range tg.AlertRuleTests {
		last = max(last, a.EvalTime)
	}
	for _, q := range tg.PromQLExprTests {
		last = max(last, q.EvalTime)
	}
	start := time.Unix(0, 0).UTC()
	for ts := start; !ts.After(start.Add(time.Duration(last))); ts = ts.Add(evalInterval) {
		var evalErr error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil {
						evalErr = errors.Join(evalErr, fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(start), err))
					}
				}
			}
		})
		if evalErr != nil {
			return append(failures, evalErr)
		}
		// Each eval_time is checked against the evaluation at or just before it.
		for _, at := range tg.AlertRuleTests {
			if t := start.Add(time.Duration(at.EvalTime)); t.Before(ts) || !t.Before(ts.Add(evalInterval)) {
				continue
			}
			if err := checkAlerts(groups, at); err != nil {
				failures = append(failures, err)
			}
		}
	}
	for _, q := range tg.PromQLExprTests {
		if err := checkQuery(suite, start.Add(time.Duration(q.EvalTime)), q); err != nil {
			failures = append(failures, err)
		}
	}
	return failures
}

// checkAlerts compares the firing alerts named at.Alertname with the expected ones, labels
// and annotations alike; pending alerts do not count.
func checkAlerts(groups []*rules.Group, at AlertRuleTest) error {
	var got []string
	found := false
	for _, g := range groups {
		for _, r := range g.Rules() {
			ar, ok := r.(*rules.AlertingRule)
			if !ok || ar.Name() != at.Alertname {
				continue
			}
			found = true
			for _, a := range ar.ActiveAlerts() {
				if a.State == rules.StateFiring {
					got = append(got, a.Labels.String()+" "+a.Annotations.String())
				}
			}
		}
	}
	if !found {
		return fmt.Errorf("alert %s at %s: no such alerting rule", at.Alertname, at.EvalTime)
	}
	var want []string
	for _, e := range at.ExpAlerts {
		l := labels.NewBuilder(labels.FromMap(e.ExpLabels)).Set(labels.AlertName, at.Alertname).Labels()
		want = append(want, l.String()+" "+labels.FromMap(e.ExpAnnotations).String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("alert %s at %s:\n  want %d firing: %q\n  got %d firing:  %q", at.Alertname, at.EvalTime, len(want), want, len(got), got)
	}
	return nil
}

// checkQuery runs an instant query and compares its samples with the expected ones.
func checkQuery(suite *promqltest.LazyLoader, ts time.Time, q PromQLExprTest) error {
	query, err := suite.QueryEngine().NewInstantQuery(suite.Context(), suite.Queryable(), nil, q.Expr, ts)
	if err != nil {
		return fmt.Errorf("query %q: %w", q.Expr, err)
	}
	defer query.Close()
	res := query.Exec(suite.Context())
	if res.Err != nil {
		return fmt.Errorf("query %q at %s: %w", q.Expr, q.EvalTime, res.Err)
	}
	var got []string
	switch v := res.Value.(type) {
	case promql.Vector:
		for _, s := range v {
			got = append(got, fmt.Sprintf("%s %g", s.Metric, s.F))
		}
	case promql.Scalar:
		got = append(got, fmt.Sprintf("{} %g", v.V))
	default:
		return fmt.Errorf("query %q: a %s, want a vector or a scalar", q.Expr, res.Value.Type())
	}
	var want []string
	for _, s := range q.ExpSamples {
		l, err := promQL.ParseMetric(s.Labels)
		if err != nil {
			return fmt.Errorf("query %q: expected labels %q: %w", q.Expr, s.Labels, err)
		}
		want = append(want, fmt.Sprintf("%s %g", l, s.Value))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("query %q at %s:\n  want %q\n  got  %q", q.Expr, q.EvalTime, want, got)
	}
	return nil
}

package monitoring

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/planner"
)

// Catalog is what an expression may select: every series name the manager exports (a
// histogram's _bucket, _sum and _count) with the labels it carries.
type Catalog map[string]labelSet

type labelSet map[string]bool

func (s labelSet) sorted() []string { return slices.Sorted(maps.Keys(s)) }

func setOf(names ...string) labelSet {
	s := labelSet{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

// NewCatalog lists the series of the given metrics.
func NewCatalog(exported []metrics.Series) Catalog {
	c := Catalog{}
	for _, m := range exported {
		if m.Type != "histogram" {
			c[m.Name] = setOf(m.Labels...)
			continue
		}
		c[m.Name+"_bucket"] = setOf(append(slices.Clone(m.Labels), "le")...)
		c[m.Name+"_sum"] = setOf(m.Labels...)
		c[m.Name+"_count"] = setOf(m.Labels...)
	}
	return c
}

// controllerRuntime are the series controller-runtime exports beside gpupool's, from the
// same registry, that the rules and the dashboard read
// (sigs.k8s.io/controller-runtime pkg/internal/controller/metrics/metrics.go).
var controllerRuntime = []metrics.Series{
	{Name: "controller_runtime_reconcile_errors_total", Type: "counter", Labels: []string{"controller"}},
}

// ManagerCatalog is what the manager's /metrics serves: gpupool's metrics and the
// controller-runtime series above.
func ManagerCatalog() Catalog {
	return NewCatalog(append(metrics.Exported(), controllerRuntime...))
}

// labelValues are the values a label takes where the code fixes them: an equality matcher on
// one of these labels with another value selects nothing, forever, so it is a typo.
var labelValues = map[string][]string{
	"phase": {string(v1alpha1.PlanAwaitingApproval), string(v1alpha1.PlanApproved), string(v1alpha1.PlanExecuting),
		string(v1alpha1.PlanSucceeded), string(v1alpha1.PlanFailed),
		string(v1alpha1.PlanRejected), string(v1alpha1.PlanExpired), string(v1alpha1.PlanSuperseded)},
	"state":   {string(v1alpha1.NodeCordoned), string(v1alpha1.NodeDraining), string(v1alpha1.NodeConfiguring), string(v1alpha1.NodeVerifying)},
	"result":  {string(v1alpha1.NodeDone), string(v1alpha1.NodeFailed)},
	"reason":  {string(planner.ReasonPartitionShape), string(planner.ReasonNodePlacement), string(planner.ReasonCapacity), string(planner.ReasonDisruption)},
	"outcome": {string(drain.Evicted), string(drain.Blocked), string(drain.Refused), string(drain.Failed)},
	// metrics.ObservePolicy's two timeouts.
	"timeout": {"drain", "configure"},
	// A condition's status, and the condition types a GPUPoolPolicy reports.
	"status": {string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown)},
	"type": {v1alpha1.ConditionReady, v1alpha1.ConditionDemandSatisfied, v1alpha1.ConditionAwaitingApproval,
		v1alpha1.ConditionReconfiguring, v1alpha1.ConditionDegraded, v1alpha1.ConditionGPUOperatorConfigured,
		v1alpha1.ConditionConflict, v1alpha1.ConditionSpecValid, v1alpha1.ConditionMIGTablesMatch,
		v1alpha1.ConditionDRASlicesCurrent, v1alpha1.ConditionPaused},
}

// grafanaVariable matches Grafana's interval variables, which stand where PromQL wants a
// duration; other variables ($policy) only appear inside label values, which parse as they are.
var grafanaVariable = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

// promQL is the parser Prometheus' rule manager uses by default.
var promQL = parser.NewParser(parser.Options{})

// Check parses expr and checks every name in it against the catalog: the metric of every
// selector, the label of every matcher (and the value, for the labels in labelValues), every
// by/without, on/ignoring and group_left/group_right label against the labels its operands
// carry. It returns the labels the result carries, which alert annotations and legends may use.
func (c Catalog) Check(expr string) ([]string, error) {
	e, err := promQL.ParseExpr(grafanaVariable.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", expr, err)
	}
	ck := &checker{catalog: c}
	out := ck.labels(e)
	if err := errors.Join(ck.errs...); err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	return out.sorted(), nil
}

// labelValuesQuery is Grafana's Prometheus variable query label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\(\s*(?:(.+?)\s*,\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// CheckVariableQuery checks a Grafana template variable's query: label_values(selector, label)
// must name an exported metric and a label it carries; anything else must be PromQL.
func (c Catalog) CheckVariableQuery(query string) error {
	m := labelValuesQuery.FindStringSubmatch(query)
	if m == nil {
		_, err := c.Check(query)
		return err
	}
	if m[1] == "" {
		return fmt.Errorf("%q: label_values without a selector lists %s of every metric Prometheus has, not gpupool's", query, m[2])
	}
	have, err := c.Check(m[1])
	if err != nil {
		return fmt.Errorf("variable query %q: %w", query, err)
	}
	if !slices.Contains(have, m[2]) {
		return fmt.Errorf("variable query %q: %s carries no label %q (it has %v)", query, m[1], m[2], have)
	}
	return nil
}

type checker struct {
	catalog Catalog
	errs    []error
}

func (ck *checker) errorf(format string, args ...any) {
	ck.errs = append(ck.errs, fmt.Errorf(format, args...))
}

// labels returns the labels n's result carries (without __name__), recording every name that
// does not exist.
func (ck *checker) labels(n parser.Node) labelSet {
	switch n := n.(type) {
	case *parser.VectorSelector:
		return ck.selector(n)
	case *parser.MatrixSelector:
		return ck.labels(n.VectorSelector)
	case *parser.SubqueryExpr:
		return ck.labels(n.Expr)
	case *parser.ParenExpr:
		return ck.labels(n.Expr)
	case *parser.UnaryExpr:
		return ck.labels(n.Expr)
	case *parser.StepInvariantExpr:
		return ck.labels(n.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{}
	case *parser.AggregateExpr:
		return ck.aggregate(n)
	case *parser.Call:
		return ck.call(n)
	case *parser.BinaryExpr:
		return ck.binary(n)
	}
	ck.errorf("%s: an expression the checker does not know (%T); teach it", n, n)
	return labelSet{}
}

func (ck *checker) selector(vs *parser.VectorSelector) labelSet {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	have, ok := ck.catalog[name]
	if !ok {
		ck.errorf("%s: no metric %q among gpupool's (internal/metrics Exported)", vs, name)
		return labelSet{}
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if !have[m.Name] {
			ck.errorf("%s: metric %s has no label %q (it has %v)", vs, name, m.Name, have.sorted())
			continue
		}
		known, fixed := labelValues[m.Name]
		if fixed && m.Type == labels.MatchEqual && !slices.Contains(known, m.Value) {
			ck.errorf("%s: label %s is never %q (it is one of %v)", vs, m.Name, m.Value, known)
		}
	}
	return maps.Clone(have)
}

func (ck *checker) aggregate(a *parser.AggregateExpr) labelSet {
	in := ck.labels(a.Expr)
	if a.Param != nil {
		ck.labels(a.Param)
	}
	for _, l := range a.Grouping {
		if !in[l] {
			ck.errorf("%s: grouping label %q is not on %s (it has %v)", a, l, a.Expr, in.sorted())
		}
	}
	var out labelSet
	switch {
	case a.Op == parser.TOPK || a.Op == parser.BOTTOMK || a.Op == parser.LIMITK || a.Op == parser.LIMIT_RATIO:
		// These select series and keep their labels.
		out = in
	case a.Without:
		out = maps.Clone(in)
		for _, l := range a.Grouping {
			delete(out, l)
		}
	default:
		out = setOf(a.Grouping...)
	}
	if a.Op == parser.COUNT_VALUES {
		if s, ok := a.Param.(*parser.StringLiteral); ok {
			out[s.Val] = true
		}
	}
	return out
}

func (ck *checker) call(c *parser.Call) labelSet {
	out := labelSet{}
	for _, a := range c.Args {
		for l := range ck.labels(a) {
			out[l] = true
		}
	}
	if c.Func.ReturnType == parser.ValueTypeScalar {
		return labelSet{}
	}
	stringArg := func(i int) string {
		if i < len(c.Args) {
			if s, ok := c.Args[i].(*parser.StringLiteral); ok {
				return s.Val
			}
		}
		return ""
	}
	switch c.Func.Name {
	case "histogram_quantile", "histogram_fraction":
		// Over a classic histogram: the buckets' le is consumed.
		if !out["le"] {
			ck.errorf("%s: %s over series without an le label (a _bucket series, summed by le)", c, c.Func.Name)
		}
		delete(out, "le")
	case "label_replace":
		// label_replace(v, dst, replacement, src, regex)
		if src := stringArg(3); src != "" && !out[src] {
			ck.errorf("%s: source label %q is not on %s", c, src, c.Args[0])
		}
		out[stringArg(1)] = true
	case "label_join":
		// label_join(v, dst, separator, src...)
		for i := 3; i < len(c.Args); i++ {
			if src := stringArg(i); !out[src] {
				ck.errorf("%s: source label %q is not on %s", c, src, c.Args[0])
			}
		}
		out[stringArg(1)] = true
	}
	return out
}

func (ck *checker) binary(b *parser.BinaryExpr) labelSet {
	lhs, rhs := ck.labels(b.LHS), ck.labels(b.RHS)
	vm := b.VectorMatching
	if b.LHS.Type() != parser.ValueTypeVector || b.RHS.Type() != parser.ValueTypeVector || vm == nil {
		// A scalar on one side: the vector's labels stay.
		out := maps.Clone(lhs)
		maps.Copy(out, rhs)
		return out
	}
	keyword := "ignoring"
	if vm.On {
		keyword = "on"
	}
	for _, l := range vm.MatchingLabels {
		switch {
		case vm.On && (!lhs[l] || !rhs[l]):
			ck.errorf("%s: on(%s) needs the label on both sides (left has %v, right %v)", b, l, lhs.sorted(), rhs.sorted())
		case !vm.On && !lhs[l] && !rhs[l]:
			ck.errorf("%s: %s(%s) names a label neither side has", b, keyword, l)
		}
	}
	// group_left copies labels from the right ("one") side, group_right from the left.
	one, many := rhs, lhs
	if vm.Card == parser.CardOneToMany {
		one, many = lhs, rhs
	}
	for _, l := range vm.Include {
		if !one[l] {
			ck.errorf("%s: group label %q is not on the side it is copied from (which has %v)", b, l, one.sorted())
		}
	}
	switch vm.Card {
	case parser.CardManyToOne, parser.CardOneToMany:
		out := maps.Clone(many)
		for _, l := range vm.Include {
			out[l] = true
		}
		return out
	case parser.CardManyToMany:
		out := maps.Clone(lhs)
		if b.Op == parser.LOR {
			maps.Copy(out, rhs)
		}
		return out
	}
	// One to one: the result keeps the left side's labels, only the on() ones, or all but the
	// ignoring() ones (Prometheus' resultMetric).
	if vm.On {
		return setOf(vm.MatchingLabels...)
	}
	out := maps.Clone(lhs)
	for _, l := range vm.MatchingLabels {
		delete(out, l)
	}
	return out
}

// templateLabels matches the labels a Go template reads from $labels (alert annotations) and
// the labels a Grafana legend names ({{shape}}).
var (
	templateLabels = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	legendLabels   = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
)

// missingLabels returns the labels text refers to (through re) that have is missing.
func missingLabels(re *regexp.Regexp, text string, have []string) []string {
	var missing []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(have, m[1]) && !slices.Contains(missing, m[1]) {
			missing = append(missing, m[1])
		}
	}
	return missing
}

// CheckLegend checks that a Grafana legend format names only labels the query's result has.
func CheckLegend(legend string, have []string) error {
	if missing := missingLabels(legendLabels, legend, have); len(missing) > 0 {
		return fmt.Errorf("legend %q names %s, which the query's result does not carry (it has %v)",
			legend, strings.Join(missing, ", "), have)
	}
	return nil
}

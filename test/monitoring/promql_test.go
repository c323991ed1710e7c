package monitoring

import (
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/metrics"
)

// TestCheckerRejectsTypos: the checker fails an expression for each kind of wrong name, so the
// dashboard and rule tests above would catch a renamed metric or label.
func TestCheckerRejectsTypos(t *testing.T) {
	catalog := NewCatalog(metrics.Exported())
	for _, tc := range []struct{ expr, want string }{
		{`sum(gpupool_pending_pod)`, `no metric "gpupool_pending_pod"`},
		{`gpupool_pending_pods{polcy="a"}`, `has no label "polcy"`},
		{`gpupool_plan_phase{phase="Faild"}`, `never "Faild"`},
		{`sum by (shap) (gpupool_pending_pods)`, `grouping label "shap"`},
		{`sum without (plan) (gpupool_pending_pods)`, `grouping label "plan"`},
		{`gpupool_pending_pods > on(profile) gpupool_stranded_slices`, `on(profile)`},
		{`gpupool_pending_pods > ignoring(node) gpupool_eligible_nodes`, `ignoring(node)`},
		{`gpupool_node_step_started_timestamp_seconds > on(policy) group_left(timeot) gpupool_policy_timeout_seconds`, `group label "timeot"`},
		{`histogram_quantile(0.9, sum by (phase) (rate(gpupool_plan_duration_seconds_bucket[5m])))`, `without an le label`},
		{`gpupool_plan_duration_seconds{phase="Failed"}`, `no metric "gpupool_plan_duration_seconds"`},
		{`gpupool_reconfigure_seconds_sum{le="10"}`, `has no label "le"`},
		{`sum by (policy) (gpupool_pending_pods`, `parsing`},
		{`{__name__=~"gpupool_.*"}`, `no metric ""`},
	} {
		_, err := catalog.Check(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%s): got error %v, want one with %q", tc.expr, err, tc.want)
		}
	}
	for _, tc := range []struct{ query, want string }{
		{`label_values(gpupool_pending_pods, polic)`, `no label "polic"`},
		{`label_values(gpupool_pendng_pods, policy)`, `no metric`},
		{`label_values(policy)`, `without a selector`},
	} {
		if err := catalog.CheckVariableQuery(tc.query); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckVariableQuery(%s): got error %v, want one with %q", tc.query, err, tc.want)
		}
	}
	if err := CheckLegend("{{shape}} {{reasn}}", []string{"reason", "shape"}); err == nil {
		t.Errorf("CheckLegend accepted a legend naming a label the result lacks")
	}
}

// TestCheckerFollowsLabels: the labels of a result follow PromQL's rules, so annotations and
// legends are checked against what Prometheus really returns.
func TestCheckerFollowsLabels(t *testing.T) {
	catalog := NewCatalog(metrics.Exported())
	for _, tc := range []struct{ expr, want string }{
		{`gpupool_pending_pods`, "policy shape"},
		{`sum by (outcome) (rate(gpupool_evictions_total[$__rate_interval])) or vector(0)`, "outcome"},
		{`histogram_quantile(0.9, sum by (le, phase) (rate(gpupool_plan_duration_seconds_bucket{policy=~"$policy"}[$__rate_interval])))`, "phase"},
		{`time() - gpupool_node_step_started_timestamp_seconds > on(policy) group_left() sum by (policy) (gpupool_policy_timeout_seconds)`, "node plan policy"},
		{`gpupool_unreported_nodes > on(policy) group_left(timeout) gpupool_policy_timeout_seconds`, "policy timeout"},
		{`gpupool_feasible_nodes / on(policy, shape) gpupool_eligible_nodes`, "policy shape"},
		{`gpupool_feasible_nodes / ignoring(shape) group_left gpupool_unreported_nodes`, "policy shape"},
		{`sum by (policy) (gpupool_stranded_slices) >= 4 and on(policy) sum by (policy) (gpupool_pending_pods) > 0`, "policy"},
		{`label_replace(gpupool_pending_pods, "resource", "$1", "shape", "(.*)")`, "policy resource shape"},
		{`count without (plan) (gpupool_node_step_started_timestamp_seconds)`, "node policy"},
	} {
		got, err := catalog.Check(tc.expr)
		if err != nil {
			t.Errorf("Check(%s): %v", tc.expr, err)
			continue
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("Check(%s) = %v, want labels %q", tc.expr, got, tc.want)
		}
	}
}

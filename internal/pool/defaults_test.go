package pool_test

import (
	"os"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestCRDDefaultsAreTheCodesDefaults holds the defaults the API server writes into a
// GPUPoolPolicy (the CRD's kubebuilder markers) to the constants the code falls back on when
// a field is unset (objects stored before a default existed, snapshots, what-if): the two
// must never disagree about what a policy that says nothing means.
func TestCRDDefaultsAreTheCodesDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../config/crd/bases/gpupool.io_gpupoolpolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	value := func(section, name string) any {
		t.Helper()
		prop, ok := spec.Properties[section].Properties[name]
		if !ok || prop.Default == nil {
			t.Fatalf("the CRD has no default for spec.%s.%s", section, name)
		}
		var v any
		if err := yaml.Unmarshal(prop.Default.Raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	text := func(section, name string) string {
		t.Helper()
		v, ok := value(section, name).(string)
		if !ok {
			t.Fatalf("spec.%s.%s: the default is not a string", section, name)
		}
		return v
	}
	duration := func(section, name string) time.Duration {
		t.Helper()
		d, err := time.ParseDuration(text(section, name))
		if err != nil {
			t.Fatalf("spec.%s.%s: %v", section, name, err)
		}
		return d
	}
	number := func(section, name string) int64 {
		t.Helper()
		v, ok := value(section, name).(float64)
		if !ok {
			t.Fatalf("spec.%s.%s: the default is not a number", section, name)
		}
		return int64(v)
	}
	for _, tc := range []struct {
		field     string
		crd, code any
	}{
		{"planning.minPendingAge", duration("planning", "minPendingAge"), pool.DefaultMinPendingAge},
		{"planning.stabilizationWindow", duration("planning", "stabilizationWindow"), pool.DefaultStabilizationWindow},
		{"disruption.drainTimeout", duration("disruption", "drainTimeout"), rollout.DefaultDrainTimeout},
		{"disruption.configureTimeout", duration("disruption", "configureTimeout"), rollout.DefaultConfigureTimeout},
		{"disruption.planTTL", duration("disruption", "planTTL"), rollout.DefaultPlanTTL},
		{"disruption.maxDisruptiveStepsPerHour", number("disruption", "maxDisruptiveStepsPerHour"), int64(pool.DefaultMaxDisruptiveStepsPerHour)},
		{"disruption.maxDisruptedNodes", number("disruption", "maxDisruptedNodes"), int64(planner.DefaultMaxDisruptedNodes)},
		{"disruption.maxReconfiguringNodes", text("disruption", "maxReconfiguringNodes"), planner.DefaultMaxReconfiguringNodes},
		{"disruption.approval", text("disruption", "approval"), string(rollout.EffectiveApproval(&v1alpha1.GPUPoolPolicy{}))},
	} {
		if tc.crd != tc.code {
			t.Errorf("spec.%s: the CRD defaults to %v, the code to %v", tc.field, tc.crd, tc.code)
		}
	}
}

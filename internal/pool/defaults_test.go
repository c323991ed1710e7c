package pool_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestCRDDefaultsAreTheCodes holds the defaults the API server writes into a stored policy
// (the CRD's kubebuilder default markers) equal to the constants the controllers fall back on
// for a policy stored before a field existed: two homes of one default that must not drift
// (issue 36).
func TestCRDDefaultsAreTheCodes(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "config", "crd", "bases", "gpupool.io_gpupoolpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	defaultOf := func(path string) string {
		s := spec
		for _, f := range strings.Split(path, ".") {
			s = s.Properties[f]
		}
		if s.Default == nil {
			t.Fatalf("spec.%s has no default in the CRD", path)
		}
		return strings.Trim(string(s.Default.Raw), `"`)
	}
	duration := func(path string) time.Duration {
		d, err := time.ParseDuration(defaultOf(path))
		if err != nil {
			t.Fatalf("spec.%s: %v", path, err)
		}
		return d
	}
	for _, tc := range []struct {
		path      string
		crd, code string
	}{
		{"planning.minPendingAge", duration("planning.minPendingAge").String(), pool.DefaultMinPendingAge.String()},
		{"planning.stabilizationWindow", duration("planning.stabilizationWindow").String(), pool.DefaultStabilizationWindow.String()},
		{"disruption.planTTL", duration("disruption.planTTL").String(), rollout.DefaultPlanTTL.String()},
		{"disruption.drainTimeout", duration("disruption.drainTimeout").String(), rollout.DefaultDrainTimeout.String()},
		{"disruption.configureTimeout", duration("disruption.configureTimeout").String(), rollout.DefaultConfigureTimeout.String()},
		{"disruption.maxDisruptiveStepsPerHour", defaultOf("disruption.maxDisruptiveStepsPerHour"), itoa(pool.DefaultMaxDisruptiveStepsPerHour)},
		{"disruption.maxDisruptedNodes", defaultOf("disruption.maxDisruptedNodes"), itoa(planner.DefaultMaxDisruptedNodes)},
		{"disruption.maxReconfiguringNodes", defaultOf("disruption.maxReconfiguringNodes"), planner.DefaultMaxReconfiguringNodes},
	} {
		if tc.crd != tc.code {
			t.Errorf("spec.%s defaults to %s in the CRD but %s in the code", tc.path, tc.crd, tc.code)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

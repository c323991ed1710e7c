package sim

import (
	"os/exec"
	"strings"
	"testing"
)

// The simulator must read the GPU Operator's formats as NVIDIA's components do, so it may not
// depend on gpupool's own writers and readers of them, directly or through another package,
// nor may its tests.
func TestDoesNotImportGpupoolsOperatorCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list: skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goTool, "list", "-test", "-deps", "github.com/gpupool/gpupool/internal/sim").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/gpupool/gpupool/internal/nvidia", "github.com/gpupool/gpupool/internal/planner"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("internal/sim (or its tests) depends on %s", dep)
			}
		}
	}
}

package sim

import (
	"os"
	"os/exec"
	"path/filepath"
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

// The simulator runs gpupool's agent on each node, so it imports internal/agent; but it must
// name MIG profiles with its own namer (profileName), never the agent's, or a naming bug of
// the agent would be accepted by the simulated mig-manager.
func TestDoesNotNameProfilesWithTheAgent(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "agent.ProfileName") {
			t.Errorf("%s names MIG profiles with the agent's namer: use profileName", f)
		}
	}
}

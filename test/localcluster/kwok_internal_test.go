package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestKwokStagesPrefersTheCachedFile(t *testing.T) {
	g := NewWithT(t)
	binDir := t.TempDir()
	cached := filepath.Join(binDir, kwokStagesFile)
	g.Expect(os.WriteFile(cached, []byte("kind: Stage\n"), 0o644)).To(Succeed())

	path, err := kwokStages(context.Background(), binDir, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(path).To(Equal(cached))
}

// A cache built before hack/control-plane.sh wrote kwok-stages.yaml still works: the stages
// come from the kwok module, which the kwok build left in the Go module cache.
func TestKwokStagesFallsBackToTheModuleCache(t *testing.T) {
	g := NewWithT(t)
	workDir := t.TempDir()

	path, err := kwokStages(context.Background(), t.TempDir(), workDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(path).To(Equal(filepath.Join(workDir, kwokStagesFile)))
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(string(data), "\nkind: Stage\n")).To(Equal(len(kwokStageFiles)))
	g.Expect(string(data)).NotTo(ContainSubstring("KwokConfiguration"), "options go on the command line")
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} {
		g.Expect(string(data)).To(ContainSubstring("\n  name: " + name + "\n"))
	}
}

func TestKwokStagesSaysHowToFixAMissingModule(t *testing.T) {
	g := NewWithT(t)
	binDir := t.TempDir()
	// A version that exists nowhere, with the proxy off so the test never leaves the machine.
	g.Expect(os.WriteFile(filepath.Join(binDir, ".kwok.version"), []byte("v0.0.0-gpupool-missing\n"), 0o644)).To(Succeed())
	t.Setenv("GOPROXY", "off")

	_, err := kwokStages(context.Background(), binDir, t.TempDir())
	g.Expect(err).To(MatchError(And(
		ContainSubstring("kwok-stages.yaml is missing from "+binDir),
		ContainSubstring("sigs.k8s.io/kwok@v0.0.0-gpupool-missing"),
		ContainSubstring("run `make control-plane`"))))
}

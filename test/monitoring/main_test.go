package monitoring

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the checked-in dashboard JSON from Dashboard()")

// repoRoot is the gpupool checkout: two folders up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "metrics", "metrics.go")); err != nil {
		t.Fatalf("internal/metrics/metrics.go not found under %s: %v", root, err)
	}
	return root
}

// Command nvidialiterals fails when product code spells one of NVIDIA's label, resource or
// driver names as a string literal outside internal/nvidia, their one home: a label such as
// nvidia.com/mig.config, a resource such as nvidia.com/gpu or the nvidia.com/mig- prefix, a DRA
// driver or device class such as gpu.nvidia.com. Only a literal that is such a name counts;
// comments and sentences that mention one (an error message naming a label) do not.
//
// Exempt: internal/nvidia itself; the simulated GPU Operator, which must not share gpupool's
// spelling (internal/sim, cmd/gpusim); tests and their support (test/, internal/fixture,
// internal/testenv, *_test.go, testdata); generated files; the tools module (hack/tools) and
// this command, whose allow list spells the names it allows.
//
// Usage: go run ./hack/nvidialiterals [root]. hack/lint-rules.sh runs it and proves it bites.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// name is a literal that is one of NVIDIA's names and nothing else: a domain ending in
// nvidia.com, optionally a path (a label key or resource), optionally "=value" (a selector).
var name = regexp.MustCompile(`^[A-Za-z0-9.-]*nvidia\.com(/[A-Za-z0-9._<>*-]*)?(=[A-Za-z0-9._-]*)?$`)

// exemptDirs are slash-separated directories, relative to the root, never read.
var exemptDirs = []string{"internal/nvidia", "internal/sim", "cmd/gpusim", "test", "internal/fixture",
	"internal/testenv", "hack/tools", "hack/nvidialiterals", ".git"}

// allowed are the copies that remain outside internal/nvidia, by file and literal, with why;
// a test in internal/nvidia (TestNamesHaveOneSpelling) holds each to its home's spelling.
var allowed = map[string][]string{
	// internal/mig sits below internal/nvidia, which imports it; mig.ResourceName moves when
	// controllers/execute.go no longer calls it.
	"internal/mig/layout.go": {"nvidia.com/mig-", "nvidia.com/"},
	// The simulator runs the node agent and must not depend on internal/nvidia, directly or
	// through the agent (internal/sim/imports_test.go), so the agent keeps its own prefix.
	"internal/agent/podresources.go": {"nvidia.com/"},
}

// Finding is one literal spelled outside its home.
type Finding struct {
	Pos     token.Position
	Literal string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %q is NVIDIA's name: spell it only in internal/nvidia and use its constant here", f.Pos, f.Literal)
}

// Check reads every Go file under root that is not exempt and returns its findings, in order.
func Check(root string) ([]Finding, error) {
	var out []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(exemptDirs, rel) || d.Name() == "testdata" || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		if ast.IsGenerated(file) {
			return nil
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !name.MatchString(s) || slices.Contains(allowed[rel], s) {
				return true
			}
			pos := fset.Position(lit.Pos())
			pos.Filename = rel
			out = append(out, Finding{Pos: pos, Literal: s})
			return true
		})
		return nil
	})
	return out, err
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	findings, err := Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvidialiterals:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
}

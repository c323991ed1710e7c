package agent_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/internal/agent"
)

func methodNames(t reflect.Type, into map[string]bool) {
	for i := range t.NumMethod() {
		into[t.Method(i).Name] = true
	}
}

// The generic interfaces keep mutating calls off the handles; this closes the
// remaining doors (go-nvml's package-level functions, and the nvml.Device
// inside GpuInstanceInfo): no agent source may name an NVML call outside the
// read-only subset.
func TestAgentSourceCallsOnlyReadOnlyNVML(t *testing.T) {
	nvmlCalls := map[string]bool{}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[nvml.Interface](), reflect.TypeFor[nvml.ExtendedInterface](),
		reflect.TypeFor[nvml.Device](), reflect.TypeFor[nvml.GpuInstance](), reflect.TypeFor[nvml.ComputeInstance](),
	} {
		methodNames(typ, nvmlCalls)
	}
	allowed := map[string]bool{}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[agent.NVML](), reflect.TypeFor[agent.Device[nvml.Device, nvml.GpuInstance]](), reflect.TypeFor[agent.GPUInstance](),
	} {
		methodNames(typ, allowed)
	}
	for _, mutating := range []string{"SetMigMode", "CreateGpuInstance", "CreateGpuInstanceWithPlacement", "Destroy", "CreateComputeInstance"} {
		if !nvmlCalls[mutating] || allowed[mutating] {
			t.Fatalf("method sets wrong: %s in nvml %v, allowed %v", mutating, nvmlCalls[mutating], allowed[mutating])
		}
	}

	var files []string
	for _, dir := range []string{".", filepath.Join("..", "..", "cmd", "agent")} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && nvmlCalls[sel.Sel.Name] && !allowed[sel.Sel.Name] {
				t.Errorf("%s: %s is an NVML call outside the agent's read-only subset", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

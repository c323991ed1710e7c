package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/printer"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// productDirs are the packages whose conditions, reasons and Events the page lists: what the
// manager and the agent run. Left out: the CLI (it writes only the approval annotations), the
// simulator's stand-ins for NVIDIA's components (internal/sim, cmd/gpusim) and test fixtures.
var productDirs = []string{"./api/...", "./controllers/...", "./cmd/manager/...", "./cmd/agent/...",
	"./internal/agent/...", "./internal/demand/...", "./internal/drain/...", "./internal/inventory/...",
	"./internal/mig/...", "./internal/planner/...", "./internal/podrecord/...", "./internal/pool/...",
	"./internal/rollout/...", "./internal/triage/..."}

var (
	// conditionName and reasonName pick the constants that name a condition type or a reason,
	// by the names the code gives them (ConditionReady, ReasonPaused, PodReasonCannotHelp).
	conditionName = regexp.MustCompile(`^[Cc]ondition[A-Z]`)
	reasonName    = regexp.MustCompile(`^([Rr]eason|PodReason)[A-Z]`)
)

// constDecl is one string constant that names a condition type or a reason.
type constDecl struct {
	Pkg, File, Name, Value string
	// Doc is the constant's own comment; Group the comment of its const block, which says
	// where the value is used.
	Doc, Group string
}

// eventCall is one place that sends an Event.
type eventCall struct {
	File, Func string
	// Object is the kind the Event is about; Type, Reason and Action as the call spells them,
	// with a constant's value resolved.
	Object, Type, Reason, Action string
}

// inlineValue is a condition type or reason spelled as a literal where it is used, not named
// by a constant.
type inlineValue struct {
	File, Func, Field, Value string
}

type source struct {
	Conditions, Reasons []constDecl
	Events              []eventCall
	Inline              []inlineValue
}

// scan loads the packages with their types, so that constants resolve to their values
// wherever they are spelled (v1alpha1.ConditionReady, pool.ReasonPaused).
func scan(root string, patterns []string) (*source, error) {
	cfg := &packages.Config{Dir: root, Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
		packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading the product's packages: %w", err)
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		return nil, fmt.Errorf("loading the product's packages: %d errors", n)
	}
	// Package order, then source order: the page changes only where the code does.
	slices.SortFunc(pkgs, func(a, b *packages.Package) int { return strings.Compare(a.PkgPath, b.PkgPath) })
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var files []*file
	for _, p := range pkgs {
		for _, f := range p.Syntax {
			rel, err := filepath.Rel(abs, p.Fset.File(f.Pos()).Name())
			if err != nil {
				return nil, err
			}
			if rel = filepath.ToSlash(rel); !strings.HasSuffix(rel, "_test.go") {
				files = append(files, &file{pkg: p, syntax: f, path: rel})
			}
		}
	}
	s := &source{}
	wrappers := findWrappers(files)
	for _, f := range files {
		s.constants(f)
		s.uses(f, wrappers)
	}
	return s, nil
}

// file is one non-test source file of a loaded package.
type file struct {
	pkg    *packages.Package
	syntax *ast.File
	path   string
}

// constants collects the file's string constants named as conditions or reasons.
func (s *source) constants(f *file) {
	for _, d := range f.syntax.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			doc, group := vs.Doc, gd.Doc
			if doc == nil {
				doc = vs.Comment
			}
			// A lone const's comment is its own, not a block's.
			if !gd.Lparen.IsValid() {
				doc, group = gd.Doc, nil
			}
			for _, name := range vs.Names {
				c, ok := f.pkg.TypesInfo.Defs[name].(*types.Const)
				if !ok || c.Val().Kind() != constant.String {
					continue
				}
				decl := constDecl{Pkg: f.pkg.PkgPath, File: f.path, Name: name.Name, Value: constant.StringVal(c.Val()),
					Doc: text(doc), Group: text(group)}
				switch {
				case conditionName.MatchString(name.Name):
					s.Conditions = append(s.Conditions, decl)
				case reasonName.MatchString(name.Name):
					s.Reasons = append(s.Reasons, decl)
				}
			}
		}
	}
}

// kindOf names the type an Event is about: its Go type's name without package or pointer.
func kindOf(t types.Type) string {
	if t == nil {
		return "?"
	}
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	if named, ok := t.(*types.Named); ok {
		return named.Obj().Name()
	}
	return types.TypeString(t, func(*types.Package) string { return "" })
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// source1 prints an expression on one line.
func source1(expr ast.Expr) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, token.NewFileSet(), expr)
	return "`" + strings.Join(strings.Fields(b.String()), " ") + "`"
}

// text is a comment's text on one line.
func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

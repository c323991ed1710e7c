package main

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"strings"

	"golang.org/x/tools/go/packages"
)

// reasonValue is what a condition reason may be (metav1.Condition's validation): a literal that
// is not one is a message, not a reason.
var reasonValue = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// slot is one of an Event's type, reason and action as a function passes it on: its own
// parameter (param >= 0, shown as its source), or a value it fixes.
type slot struct {
	param int
	shown string
}

// wrapper is a function that sends an Event with a reason it is given, directly (the plan
// controller's planEvent) or through another wrapper (markStopped): its callers choose the
// reason, so they are the places the page lists.
type wrapper struct {
	object                    string
	eventType, reason, action slot
}

// fn is what a function body's arguments are resolved against: its parameters, and every value
// assigned to each of its local variables.
type fn struct {
	file    *file
	name    string
	params  map[types.Object]int
	assigns map[types.Object][]ast.Expr
}

func newFn(f *file, fd *ast.FuncDecl) *fn {
	info := f.pkg.TypesInfo
	c := &fn{file: f, name: funcName(fd), params: map[types.Object]int{}, assigns: map[types.Object][]ast.Expr{}}
	i := 0
	for _, field := range fd.Type.Params.List {
		for _, n := range field.Names {
			c.params[info.Defs[n]] = i
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != len(n.Rhs) {
				return true
			}
			for i, lhs := range n.Lhs {
				if id, ok := lhs.(*ast.Ident); ok {
					if obj := info.ObjectOf(id); obj != nil {
						c.assigns[obj] = append(c.assigns[obj], n.Rhs[i])
					}
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if i < len(n.Values) {
					c.assigns[info.Defs[id]] = append(c.assigns[info.Defs[id]], n.Values[i])
				}
			}
		}
		return true
	})
	return c
}

// funcs calls visit for every function with a body in files.
func funcs(files []*file, visit func(*fn, *ast.FuncDecl)) {
	for _, f := range files {
		for _, d := range f.syntax.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				visit(newFn(f, fd), fd)
			}
		}
	}
}

// findWrappers finds the wrappers, those that call a wrapper included, until no more turn up.
func findWrappers(files []*file) map[*types.Func]wrapper {
	out := map[*types.Func]wrapper{}
	for found := true; found; {
		found = false
		funcs(files, func(c *fn, fd *ast.FuncDecl) {
			self, _ := c.file.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
			if _, known := out[self]; known {
				return
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if w, ok := c.event(call, out); ok && w.reason.param >= 0 {
					out[self], found = w, true
				}
				return true
			})
		})
	}
	return out
}

// event reads call as an Event sent from c: through EventRecorder.Eventf, or a wrapper.
func (c *fn) event(call *ast.CallExpr, wrappers map[*types.Func]wrapper) (wrapper, bool) {
	if isEventf(c.file.pkg, call) {
		return wrapper{object: kindOf(c.file.pkg.TypesInfo.TypeOf(call.Args[0])),
			eventType: c.slot(call.Args[2]), reason: c.slot(call.Args[3]), action: c.slot(call.Args[4])}, true
	}
	w, ok := wrappers[callee(c.file.pkg, call)]
	if !ok {
		return wrapper{}, false
	}
	pass := func(s slot) slot {
		if s.param < 0 || s.param >= len(call.Args) {
			return s
		}
		return c.slot(call.Args[s.param])
	}
	return wrapper{object: w.object, eventType: pass(w.eventType), reason: pass(w.reason), action: pass(w.action)}, true
}

// slot is an argument as c passes it on: one of c's parameters, or a value.
func (c *fn) slot(expr ast.Expr) slot {
	if id, ok := ast.Unparen(expr).(*ast.Ident); ok {
		if i, ok := c.params[c.file.pkg.TypesInfo.ObjectOf(id)]; ok {
			return slot{param: i, shown: "computed: " + source1(expr)}
		}
	}
	return slot{param: -1, shown: c.value(expr, 0)}
}

// value is an expression as the page shows it: a constant's value, a local variable's values
// joined with "or", else the expression, marked computed.
func (c *fn) value(expr ast.Expr, depth int) string {
	info := c.file.pkg.TypesInfo
	if tv := info.Types[expr]; tv.Value != nil && tv.Value.Kind() == constant.String {
		v := "`" + constant.StringVal(tv.Value) + "`"
		if _, lit := ast.Unparen(expr).(*ast.BasicLit); lit {
			return v
		}
		return v + " (" + source1(expr) + ")"
	}
	if id, ok := ast.Unparen(expr).(*ast.Ident); ok && depth < 3 {
		if values := c.assigns[info.ObjectOf(id)]; len(values) > 0 {
			shown := make([]string, len(values))
			for i, v := range values {
				shown[i] = c.value(v, depth+1)
			}
			return strings.Join(shown, " or ")
		}
	}
	return "computed: " + source1(expr)
}

// isEventf reports whether call is EventRecorder.Eventf (k8s.io/client-go/tools/events):
// Eventf(regarding, related, eventtype, reason, action, note, args...).
func isEventf(p *packages.Package, call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Eventf" || len(call.Args) < 6 {
		return false
	}
	f, ok := p.TypesInfo.Uses[sel.Sel].(*types.Func)
	return ok && f.Pkg() != nil && strings.HasPrefix(f.Pkg().Path(), "k8s.io/client-go/tools/")
}

// uses collects the file's Events (but those inside wrappers, whose callers are listed) and the
// condition types and reasons it spells as literals.
func (s *source) uses(f *file, wrappers map[*types.Func]wrapper) {
	funcs([]*file{f}, func(c *fn, fd *ast.FuncDecl) {
		self, _ := f.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
		_, inWrapper := wrappers[self]
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if w, ok := c.event(n, wrappers); ok && !inWrapper {
					s.Events = append(s.Events, eventCall{File: f.path, Func: c.name, Object: w.object,
						Type: w.eventType.shown, Reason: w.reason.shown, Action: w.action.shown})
				}
			case *ast.KeyValueExpr:
				key, ok := n.Key.(*ast.Ident)
				if ok && (key.Name == "Reason" || (key.Name == "Type" && isCondition(f.pkg, key))) {
					s.inline(c, key.Name, n.Value)
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == "reason" && i < len(n.Rhs) {
						s.inline(c, "reason", n.Rhs[i])
					}
				}
			}
			return true
		})
	})
}

// isCondition reports whether key is a field of metav1.Condition; other structs' Type fields
// are not condition types.
func isCondition(p *packages.Package, key *ast.Ident) bool {
	field, ok := p.TypesInfo.Uses[key].(*types.Var)
	return ok && field.IsField() && field.Pkg() != nil && field.Pkg().Path() == "k8s.io/apimachinery/pkg/apis/meta/v1"
}

// inline records expr when it is a string literal shaped like a reason, not a named constant.
func (s *source) inline(c *fn, field string, expr ast.Expr) {
	lit, ok := ast.Unparen(expr).(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return
	}
	tv := c.file.pkg.TypesInfo.Types[lit]
	if tv.Value == nil || !reasonValue.MatchString(constant.StringVal(tv.Value)) {
		return
	}
	s.Inline = append(s.Inline, inlineValue{File: c.file.path, Func: c.name, Field: field, Value: constant.StringVal(tv.Value)})
}

// callee is the function a call calls, when it is one declared by name.
func callee(p *packages.Package, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := call.Fun.(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	f, _ := p.TypesInfo.Uses[id].(*types.Func)
	return f
}

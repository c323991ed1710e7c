package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

const modulePath = "github.com/gpupool/gpupool/"

// writeConditions renders what scan found. Each list is in package and source order, so that the
// page changes only where the code does.
func writeConditions(w *bytes.Buffer, s *source) {
	w.WriteString(generatedBy)
	w.WriteString(`# Conditions and Events

What the manager and the node agent write into status conditions and Events, read from their Go
packages: every string constant named as a condition type (` + "`Condition...`" + `) or a reason
(` + "`Reason...`, `PodReason...`" + `) with its comment, every call that sends an Event, and the
condition types and reasons spelled as literals where they are set. What the policy's conditions
mean for an operator and what to do about each: [operate.md](../operate.md). The objects that
carry them: [api.md](api.md).

- [Condition types](#condition-types)
- [Reasons](#reasons)
- [Events](#events)
- [Condition types and reasons spelled where they are set](#condition-types-and-reasons-spelled-where-they-are-set)

## Condition types

`)
	constTables(w, s.Conditions, "Type")
	w.WriteString(`## Reasons

A condition's reason, and most Events' reason, is one of these. Where a comment says so, the
same value is used by several conditions or Events.

`)
	constTables(w, s.Reasons, "Reason")
	w.WriteString(`## Events

Every place that sends an Event, with the kind of object the Event is about (` + "`kubectl describe`" + `
shows it there; a node step's Events are on the plan and mirrored on the node). A value in
backticks is fixed; one marked computed is chosen at run time from the expression shown: a
decision's reason is one of the reasons above, and a node step's state is one of the
NodeStepState values in [api.md](api.md).

| Object | Type | Reason | Action | Sent from |
| --- | --- | --- | --- | --- |
`)
	for _, e := range s.Events {
		fmt.Fprintf(w, "| %s | %s | %s | %s | `%s` (%s) |\n", e.Object, eventType(e.Type), cell(e.Reason), cell(e.Action), e.File, e.Func)
	}
	w.WriteString(`
## Condition types and reasons spelled where they are set

Values written as a literal, not through a named constant: a ` + "`Type`" + ` of a
` + "`metav1.Condition`" + `, a ` + "`Reason`" + ` field, or a variable named ` + "`reason`" + `.

| Field | Value | Where |
| --- | --- | --- |
`)
	for _, v := range s.Inline {
		fmt.Fprintf(w, "| %s | `%s` | `%s` (%s) |\n", v.Field, cell(v.Value), v.File, v.Func)
	}
}

// constTables writes one table per package and const block, under the block's comment.
func constTables(w *bytes.Buffer, decls []constDecl, column string) {
	pkg, group := "", "\x00"
	for _, d := range decls {
		if d.Pkg != pkg {
			if pkg != "" {
				fmt.Fprintln(w)
			}
			pkg, group = d.Pkg, "\x00"
			fmt.Fprintf(w, "### %s\n\n", strings.TrimPrefix(d.Pkg, modulePath))
		}
		if d.Group != group {
			if group != "\x00" {
				fmt.Fprintln(w)
			}
			group = d.Group
			if group != "" {
				fmt.Fprintf(w, "%s\n\n", group)
			}
			fmt.Fprintf(w, "| %s | Constant | Meaning |\n| --- | --- | --- |\n", column)
		}
		fmt.Fprintf(w, "| `%s` | `%s` | %s |\n", d.Value, d.Name, cell(d.Doc))
	}
	fmt.Fprintln(w)
}

// eventTypeConst shows corev1's event type constants as their values alone.
var eventTypeConst = regexp.MustCompile("`(Normal|Warning)` \\(`[^`]*`\\)")

func eventType(v string) string {
	return cell(eventTypeConst.ReplaceAllString(v, "$1"))
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// outputFlags are kubectl's -o and its companions (--template, --show-managed-fields,
// --allow-missing-template-keys), from cli-runtime's PrintFlags, plus "wide": the table with
// every row and more columns. The default, "", is the table.
type outputFlags struct {
	format string
	print  *genericclioptions.PrintFlags
	// printer is set by check for every format but the tables.
	printer printers.ResourcePrinter
}

func addOutputFlags(cmd *cobra.Command) *outputFlags {
	o := &outputFlags{print: genericclioptions.NewPrintFlags("")}
	// PrintFlags would register -o with its own help; ours also names wide.
	o.print.OutputFormat = nil
	o.print.AddFlags(cmd)
	o.print.OutputFormat = &o.format
	o.print.OutputFlagSpecified = func() bool { return cmd.Flag("output").Changed }
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "Output format. One of: ("+strings.Join(o.formats(), ", ")+").")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.formats(), cobra.ShellCompDirectiveNoFileComp))
	return o
}

func (o *outputFlags) formats() []string { return append(o.print.AllowedFormats(), "wide") }

// check validates -o before anything is read, so that a typo costs no API call.
func (o *outputFlags) check() error {
	o.printer = nil
	if o.table() {
		return nil
	}
	p, err := o.print.ToPrinter()
	if err != nil {
		return usageError("-o %q: want one of %s", o.format, strings.Join(o.formats(), ", "))
	}
	o.printer = p
	return nil
}

// table is true for the human formats: the default and wide.
func (o *outputFlags) table() bool { return o.format == "" || o.format == "wide" }

func (o *outputFlags) wide() bool { return o.format == "wide" }

// printObject prints an API object (or an unstructured List) as kubectl get does: with its
// apiVersion and kind, without managedFields unless --show-managed-fields.
func (o *outputFlags) printObject(obj runtime.Object, w io.Writer) error {
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		// The client decodes typed objects without their kind; cli-runtime's TypeSetter would
		// do this too, but it refuses the documents printDocument passes as runtime.Unknown.
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			return err
		}
		obj = obj.DeepCopyObject()
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return o.printer.PrintObj(obj, w)
}

// printDocument prints one of the tool's own documents (a verdict, a status, a what-if), which
// are not API objects: JSON, YAML, jsonpath and templates see its lowerCamel fields; -o name
// prints the objects it is about, named.
func (o *outputFlags) printDocument(doc any, named []runtime.Object, w io.Writer) error {
	if o.format == "name" {
		for _, obj := range named {
			if err := o.printer.PrintObj(obj, w); err != nil {
				return err
			}
		}
		return nil
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", o.format, err)
	}
	// runtime.Unknown is how cli-runtime's printers take JSON that has no kind.
	return o.printer.PrintObj(&runtime.Unknown{Raw: data, ContentType: runtime.ContentTypeJSON}, w)
}

// listOf turns objects into the List `kubectl get` prints for several objects: apiVersion v1,
// kind List, each item with its own apiVersion and kind.
func listOf(objs []client.Object) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{Object: map[string]any{}}
	list.SetAPIVersion("v1")
	list.SetKind("List")
	list.SetResourceVersion("")
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *u)
	}
	return list, nil
}

func toUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// named is obj with its apiVersion and kind set, for -o name.
func named(obj client.Object) runtime.Object {
	u, err := toUnstructured(obj)
	if err != nil {
		return obj
	}
	return u
}

// listItems returns a typed list's items as client.Objects.
func listItems(list client.ObjectList) ([]client.Object, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			out = append(out, o)
		}
	}
	return out, nil
}

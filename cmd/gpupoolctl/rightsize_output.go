package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// printRightsize prints the table (one row per workload, then what each CannotTell needs) or
// the document.
func printRightsize(out *outputFlags, doc *rightsizeOutput, allNamespaces bool, w io.Writer) error {
	if !out.table() {
		var names []runtime.Object
		for _, wl := range doc.Workloads {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(kindOf(wl.Kind))
			u.SetNamespace(wl.Namespace)
			u.SetName(wl.Name)
			names = append(names, u)
		}
		return out.printDocument(doc, names, w)
	}
	if err := writeRightsize(w, doc, allNamespaces, out.wide()); err != nil {
		return failure(err)
	}
	return nil
}

// kindOf is the group and version of the workload kinds rightsize names, for -o name.
func kindOf(kind string) schema.GroupVersionKind {
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
		return schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind}
	case "Job":
		return schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: kind}
	}
	return schema.GroupVersionKind{Version: "v1", Kind: kind}
}

func writeRightsize(w io.Writer, doc *rightsizeOutput, allNamespaces, wide bool) error {
	ew := &errWriter{w: w}
	if len(doc.Workloads) == 0 {
		ew.printf("No GPU workload found: no pod asks for a MIG profile or a whole GPU here (-A lists every namespace).\n")
	} else {
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		if allNamespaces {
			fmt.Fprintf(tw, "NAMESPACE\t")
		}
		fmt.Fprintf(tw, "WORKLOAD\tPODS\tASKS\tUSES (P95/PEAK)\tRECOMMENDS\tCONFIDENCE\tFREES")
		if wide {
			fmt.Fprintf(tw, "\tPOOL")
		}
		fmt.Fprintln(tw)
		for _, wl := range doc.Workloads {
			if allNamespaces {
				fmt.Fprintf(tw, "%s\t", wl.Namespace)
			}
			uses, recommends := "-", "-"
			if wl.P95MiB > 0 || wl.PeakMiB > 0 {
				uses = gib(wl.P95MiB) + "/" + gib(wl.PeakMiB)
			}
			if wl.Recommended != "" {
				recommends = wl.Recommended
			}
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%s\t%s\t%s\t%s", wl.Kind, wl.Name, wl.Pods, wl.Requested, uses, recommends,
				confidence(wl), plural(wl.FreedSlices, "slice"))
			if wide {
				fmt.Fprintf(tw, "\t%s", poolOrDash(wl.Pool))
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush()
		for _, wl := range doc.Workloads {
			if wl.Verdict != rightsize.CannotTell && !wide {
				continue
			}
			ew.printf("\n")
			ew.wrap(wl.Kind+"/"+wl.Name+": ", "  ", wl.Message)
			if wl.Fix != "" {
				ew.wrap("  Fix: ", "  ", wl.Fix)
			}
		}
		freed := 0
		for _, wl := range doc.Workloads {
			freed += wl.FreedSlices
		}
		basis := "memory only: compute is not measured"
		if doc.ComputeMeasured {
			basis = "memory and measured compute"
		}
		ew.printf("\nApplied, the recommendations free %s (%s).\n", plural(freed, "memory slice"), basis)
	}
	for _, g := range doc.Unreadable {
		ew.wrap("Not seen: ", "  ", g.String())
	}
	return ew.err
}

// confidence is the verdict in a word, with its reason where it is not the plain one.
func confidence(wl workloadOutput) string {
	switch wl.Verdict {
	case rightsize.CannotTell:
		return "cannot tell (" + string(wl.Reason) + ")"
	case rightsize.Keep:
		if wl.Reason == rightsize.ReasonHeadroomShort {
			return "keep (little headroom)"
		}
		return "keep"
	case rightsize.Grow:
		return "grow (peak reached the instance)"
	}
	return "shrink"
}

// gib prints MiB as GiB with one decimal.
func gib(mib int64) string { return fmt.Sprintf("%.1fGi", float64(mib)/1024) }

func poolOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

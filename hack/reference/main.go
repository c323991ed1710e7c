// Command reference writes the pages of docs/reference that come from gpupool's own Go code:
// the index (README.md), metrics.md from internal/metrics' Exported, and
// conditions-and-events.md from the condition and reason constants and the Event calls of the
// product's packages. hack/reference/generate.sh runs it with the API page (crd-ref-docs) and
// the CLI pages (cobra/doc): `make reference` writes docs/reference, and `make verify` renders
// the same into a temporary folder and fails on any difference, so no page goes stale unnoticed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "docs/reference", "folder to write metrics.md and conditions-and-events.md into")
	root := flag.String("root", ".", "the repository's root, whose packages are read for conditions and Events")
	flag.Parse()
	if err := run(*root, *out); err != nil {
		fmt.Fprintf(os.Stderr, "reference: %v\n", err)
		os.Exit(1)
	}
}

// index is the folder's front page.
const index = generatedBy + `# Reference

Generated from the code by ` + "`make reference`" + `; ` + "`make verify`" + ` fails when a page here is not
what the code says.

- [API](api.md): the fields of GPUPoolPolicy, RepartitionPlan and GPUNode (gpupool.io/v1alpha1),
  with defaults and validation.
- [Conditions and Events](conditions-and-events.md): condition types, reasons, and every Event
  the manager sends.
- [Metrics](metrics.md): what the manager exports, with labels and help.
- [Command line](cli/kubectl_gpupool.md): ` + "`kubectl gpupool`" + ` and its commands (the same binary
  runs as ` + "`gpupoolctl`" + `).
`

func run(root, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	if err := os.WriteFile(filepath.Join(out, "README.md"), []byte(index), 0o644); err != nil {
		return fmt.Errorf("writing README.md: %w", err)
	}
	var metrics bytes.Buffer
	writeMetrics(&metrics)
	if err := os.WriteFile(filepath.Join(out, "metrics.md"), metrics.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing metrics.md: %w", err)
	}
	src, err := scan(root, productDirs)
	if err != nil {
		return err
	}
	var conditions bytes.Buffer
	writeConditions(&conditions, src)
	if err := os.WriteFile(filepath.Join(out, "conditions-and-events.md"), conditions.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing conditions-and-events.md: %w", err)
	}
	return nil
}

package main

import (
	"github.com/gpupool/gpupool/internal/dcgm"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// computeSource is what --prometheus-url gives the right-sizing pass: a reader of DCGM
// exporter's compute activity per pod, or nil without the flag (recommendations then cover
// memory only, and say so). A malformed URL stops the manager at start, where it is seen.
func computeSource(prometheusURL string) (rightsize.ComputeSource, error) {
	if prometheusURL == "" {
		// A nil interface, not a nil *dcgm.Source inside one: the pass tests Compute != nil.
		return nil, nil
	}
	src, err := dcgm.New(prometheusURL, dcgm.Options{})
	if err != nil {
		return nil, err
	}
	return src, nil
}

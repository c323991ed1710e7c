package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpupool/gpupool/internal/dcgm"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// computeFlags are rightsize's flags for measured compute: without --prometheus-url the
// recommendations cover memory only, and say so.
type computeFlags struct {
	prometheusURL string
	window        time.Duration
}

func addComputeFlags(cmd *cobra.Command) *computeFlags {
	f := &computeFlags{}
	cmd.Flags().StringVar(&f.prometheusURL, "prometheus-url", "", "Prometheus's base URL (e.g. http://localhost:9090 through kubectl "+
		"port-forward): each pod's compute is then read from DCGM exporter's "+dcgm.Metric+" (its p95 over --compute-window) and a "+
		"recommendation keeps the compute slices that needs. Without it, recommendations cover memory only.")
	cmd.Flags().DurationVar(&f.window, "compute-window", dcgm.DefaultWindow, "How far back the p95 of compute activity looks (with --prometheus-url).")
	return f
}

// source checks the flags and returns the reader they name: nil without --prometheus-url.
func (f *computeFlags) source() (*dcgm.Source, error) {
	if f.prometheusURL == "" {
		return nil, nil
	}
	if f.window <= 0 {
		return nil, usageError("--compute-window=%s: want a positive duration, e.g. 24h", f.window)
	}
	src, err := dcgm.New(f.prometheusURL, dcgm.Options{Window: f.window})
	if err != nil {
		return nil, usageError("%v", err)
	}
	return src, nil
}

// activity reads each pod's compute from src; nil (not measured) without one. The user asked
// for compute by naming Prometheus, so a failure to read it fails the command rather than
// quietly recommending from memory.
func activity(ctx context.Context, src *dcgm.Source) (rightsize.ComputeActivity, error) {
	if src == nil {
		return nil, nil
	}
	a, err := src.ComputeActivity(ctx)
	if err != nil {
		return nil, failure(err)
	}
	return a, nil
}

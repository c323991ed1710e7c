package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// rightsizedEvidence is what-if --rightsized's --min-window and --min-samples: the evidence a
// pod needs before its recommendation counts, as kubectl gpupool rightsize's flags of the same
// names say it, so that both commands recommend alike. A demo or a test on a simulated cluster
// shortens both from a day.
type rightsizedEvidence struct {
	minWindow  time.Duration
	minSamples int64
}

func addRightsizedEvidenceFlags(cmd *cobra.Command, e *rightsizedEvidence) {
	cmd.Flags().DurationVar(&e.minWindow, "min-window", rightsize.DefaultMinWindow,
		"With --rightsized: how long a pod must have been measured before its use counts (as kubectl gpupool rightsize --min-window).")
	cmd.Flags().Int64Var(&e.minSamples, "min-samples", rightsize.DefaultMinSamples,
		"With --rightsized: how many samples a pod needs before its use counts (as kubectl gpupool rightsize --min-samples).")
}

// options checks the flags and turns them into the recommender's options.
func (e rightsizedEvidence) options() (rightsize.Options, error) {
	if e.minWindow <= 0 || e.minSamples <= 0 {
		return rightsize.Options{}, usageError("--min-window and --min-samples must be positive")
	}
	return rightsize.Options{MinWindow: e.minWindow, MinSamples: e.minSamples}, nil
}

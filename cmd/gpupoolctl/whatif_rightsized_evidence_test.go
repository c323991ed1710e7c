package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// what-if --rightsized takes the evidence a pod needs from --min-window and --min-samples, as
// kubectl gpupool rightsize does: the snapshot's two days of samples free a GPU by default and
// nothing when three days are asked for; a non-positive minimum is a usage mistake.
func TestWhatIfRightsizedEvidenceFlags(t *testing.T) {
	freed := func(args ...string) (int, int) {
		t.Helper()
		code, out, errOut := invoke(t, "", append([]string{"what-if", "-f", rightsizedSnapshot, "--rightsized", "-o", "json"}, args...)...)
		if code != exitOK {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		var doc planOutput
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Rightsized == nil || len(doc.Rightsized.Pools) != 1 {
			t.Fatalf("%q: rightsized = %+v, want one pool", args, doc.Rightsized)
		}
		return doc.Rightsized.Pools[0].FreedGPUs, len(doc.Rightsized.Pools[0].Applied)
	}
	if gpus, applied := freed(); gpus != 1 || applied != 1 {
		t.Errorf("defaults: %d GPUs freed by %d workloads, want 1 by 1", gpus, applied)
	}
	if gpus, applied := freed("--min-window", "72h"); gpus != 0 || applied != 0 {
		t.Errorf("--min-window 72h: %d GPUs freed by %d workloads, want none: two days of samples are too few", gpus, applied)
	}
	if gpus, applied := freed("--min-samples", "10000"); gpus != 0 || applied != 0 {
		t.Errorf("--min-samples 10000: %d GPUs freed by %d workloads, want none", gpus, applied)
	}
	code, _, errOut := invoke(t, "", "what-if", "-f", rightsizedSnapshot, "--rightsized", "--min-window", "0s")
	if code != exitInvalid || !strings.Contains(errOut, "--min-window and --min-samples must be positive") {
		t.Errorf("--min-window 0s: exit %d, %q; want %d", code, errOut, exitInvalid)
	}
}

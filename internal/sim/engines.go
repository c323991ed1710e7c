package sim

import "github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

// engineTotals gives the whole-GPU profile (the one with the most compute slices) at least the
// streaming multiprocessors, copy engines, decoders and encoders that the most instances of any
// one profile have together, as on real parts: an H100's or H200's 7g profile has the 7
// decoders of its seven 1g instances, where go-nvml's mock says 5. Nothing read these counts
// until NVIDIA's DRA driver in its DynamicMIG mode made the largest count of each the GPU's
// shared counter (cmd/gpu-kubelet-plugin/partitions.go PartSharedCounterSets): with the mock's
// 5, the scheduler would never allocate a sixth 1g partition, which a real GPU holds. JPEG and
// optical-flow engines are left alone: the "+me" profiles hold them, and their counts already
// allow what NVML allows (slots.go mediaEnginesSuffice). c's profile map is modified: pass a copy
// (nvmlmock.Corrected returns one).
func engineTotals(c gpus.Config) gpus.Config {
	profiles := c.MIGProfiles.GpuInstanceProfiles
	whole, found := 0, false
	for id, p := range profiles {
		if !found || p.SliceCount > profiles[whole].SliceCount {
			whole, found = id, true
		}
	}
	if !found {
		return c
	}
	w := profiles[whole]
	for _, p := range profiles {
		w.MultiprocessorCount = max(w.MultiprocessorCount, p.InstanceCount*p.MultiprocessorCount)
		w.CopyEngineCount = max(w.CopyEngineCount, p.InstanceCount*p.CopyEngineCount)
		w.DecoderCount = max(w.DecoderCount, p.InstanceCount*p.DecoderCount)
		w.EncoderCount = max(w.EncoderCount, p.InstanceCount*p.EncoderCount)
	}
	profiles[whole] = w
	return c
}

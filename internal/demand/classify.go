package demand

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// Kind says how a GPU resource hands out hardware, which decides what the
// planner must change on a node to create more of it.
type Kind string

const (
	// KindGPU is a whole GPU with MIG off (nvidia.com/gpu).
	KindGPU Kind = "GPU"
	// KindMIG is one MIG instance of a profile (nvidia.com/mig-<profile>, the mixed strategy).
	KindMIG Kind = "MIG"
	// KindShared is a time-sliced or MPS replica of a GPU or of a MIG instance, as the device
	// plugin advertises it with renameByDefault (nvidia.com/gpu.shared, nvidia.com/mig-<profile>.shared).
	KindShared Kind = "Shared"
)

const (
	// ResourceGPU is the device plugin's whole-GPU resource.
	ResourceGPU corev1.ResourceName = nvidia.ResourceGPU
	// ResourceSharedGPU is the device plugin's name for replicas of a shared whole GPU.
	ResourceSharedGPU corev1.ResourceName = nvidia.ResourceGPU + nvidia.SharedSuffix
)

// Classify says which GPU resource a resource name is: its kind and, for MIG
// instances and replicas of them, the MIG profile in its canonical spelling
// ("1g.10gb+me" for nvidia.com/mig-1g.10gb.me). ok is false for every resource
// that is not an NVIDIA GPU resource, including cpu, memory and misspellings.
//
// MIG profile names are accepted in the general "<N>g.<M>gb<suffix>" form
// rather than only the profiles of the built-in products, so that a pod asking
// for a profile no GPU in the pool offers still shows up as demand the planner
// can explain, instead of vanishing.
func Classify(resource corev1.ResourceName) (kind Kind, profile string, ok bool) {
	switch resource {
	case ResourceGPU:
		return KindGPU, "", true
	case ResourceSharedGPU:
		return KindShared, "", true
	}
	rest, found := strings.CutPrefix(string(resource), mig.ResourcePrefix)
	if !found {
		return "", "", false
	}
	kind = KindMIG
	if base, shared := strings.CutSuffix(rest, nvidia.SharedSuffix); shared {
		kind, rest = KindShared, base
	}
	// A second ".shared" would make a profile named "...+shared", which no GPU has.
	if !wellFormedMIGName(rest) || strings.HasSuffix(rest, nvidia.SharedSuffix) || strings.Contains(rest, nvidia.SharedSuffix+".") {
		return "", "", false
	}
	profile, ok = mig.ProfileFromResource(rest)
	if !ok {
		return "", "", false
	}
	return kind, profile, true
}

// wellFormedMIGName accepts "<N>g.<M>gb" with N and M positive, followed by
// nothing or by lowercase "."- or "-"-separated words (".me", ".me.all",
// "-me"). It is stricter than mig.ProfileFromResource, which also takes
// profile spellings with "+" that are not valid Kubernetes resource names.
func wellFormedMIGName(s string) bool {
	c, rest, ok := positiveInt(s)
	if !ok || c == 0 {
		return false
	}
	rest, ok = strings.CutPrefix(rest, "g.")
	if !ok {
		return false
	}
	m, rest, ok := positiveInt(rest)
	if !ok || m == 0 {
		return false
	}
	rest, ok = strings.CutPrefix(rest, "gb")
	if !ok {
		return false
	}
	for rest != "" {
		if rest[0] != '.' && rest[0] != '-' {
			return false
		}
		j := 1
		for j < len(rest) && (rest[j] >= 'a' && rest[j] <= 'z' || rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		if j == 1 {
			return false
		}
		rest = rest[j:]
	}
	return true
}

// positiveInt reads up to six leading decimal digits without a leading zero;
// six digits is far beyond any real slice count or memory size and keeps the
// value small enough never to overflow.
func positiveInt(s string) (int, string, bool) {
	n, i := 0, 0
	for i < len(s) && i < 6 && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		i++
	}
	if i == 0 || (s[0] == '0' && i > 1) {
		return 0, s, false
	}
	if i < len(s) && s[i] >= '0' && s[i] <= '9' {
		return 0, s, false
	}
	return n, s[i:], true
}

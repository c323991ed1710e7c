// Finding a built-in product by name, GPU Feature Discovery label or PCI device ID.

package mig

import (
	"slices"
	"strings"
)

// LookupProduct finds a built-in product by canonical name, nvidia.com/gpu.product
// label value (e.g. "NVIDIA-H100-80GB-HBM3") or NVML device name (e.g.
// "NVIDIA H200"), ignoring case. A GFD "-MIG-<profile>" or "-SHARED" suffix is
// ignored. The most specific Match entry wins, then table order.
func LookupProduct(name string) (*Product, bool) {
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, false
	}
	for _, p := range builtin {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	toks := productTokens(name)
	var best *Product
	bestScore := 0
	for _, p := range builtin {
		for _, m := range p.Match {
			if s := matchScore(m, toks); s > bestScore {
				best, bestScore = p, s
			}
		}
	}
	return best, best != nil
}

// LookupProductByPCIID finds a built-in product by PCI device ID, either the
// bare 16-bit device ID (0x2330) or NVML's combined form (0x233010DE).
func LookupProductByPCIID(id uint32) (*Product, bool) {
	dev := id
	if id > 0xFFFF {
		if id&0xFFFF != 0x10DE {
			return nil, false
		}
		dev = id >> 16
	}
	for _, p := range builtin {
		if slices.Contains(p.PCIDeviceIDs, uint16(dev)) {
			return p, true
		}
	}
	return nil, false
}

// ProductLabel is the nvidia.com/gpu.product label GPU Feature Discovery writes for a GPU of
// this NVML device name: characters other than letters, digits, '-', '_', '.' and spaces
// dropped, and runs of spaces turned into one '-' (NVIDIA/k8s-device-plugin
// internal/lm/resource.go, getProductName, and its sanitise). The suffixes GFD adds under
// the single MIG strategy or sharing are not included.
func ProductLabel(nvmlName string) string {
	keep := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ' ':
			return r
		}
		return -1
	}, nvmlName)
	return strings.Join(strings.Fields(keep), "-")
}

func productTokens(name string) []string {
	up := strings.ToUpper(name)
	fields := strings.FieldsFunc(up, func(r rune) bool {
		return r == '-' || r == ' ' || r == '_' || r == '/' || r == '\t'
	})
	out := fields[:0]
	for _, f := range fields {
		if f == "MIG" {
			break // GFD single strategy appends -MIG-<profile>
		}
		if f == "SHARED" {
			continue // GFD marks time-sliced GPUs
		}
		out = append(out, f)
	}
	return out
}

// matchScore is the number of positive tokens of entry when all are present in
// toks and no vetoed token is, else 0.
func matchScore(entry string, toks []string) int {
	score := 0
	for t := range strings.SplitSeq(strings.ToUpper(entry), "-") {
		if neg, ok := strings.CutPrefix(t, "!"); ok {
			if slices.Contains(toks, neg) {
				return 0
			}
			continue
		}
		if !slices.Contains(toks, t) {
			return 0
		}
		score++
	}
	return score
}

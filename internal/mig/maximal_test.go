package mig

import (
	"slices"
	"strings"
	"testing"
)

// The lists below are derived from the placement rules of docs/architecture.md ("MIG
// geometry"), not copied from NVIDIA: the MIG user guide draws its supported
// combinations as a figure whose text the search tools could not read.
// The derivation, for the six profiles without media extensions (7g, 4g, 3g,
// 2g, 1g with two memory slices "d", 1g "s"), in halves H0..H3 of the eight
// memory slices:
//   - 7g alone: 1.
//   - 4g takes H0+H1 and leaves 3 compute slices for H2,H3: 3g; 2g+d; 2g+s;
//     d+d; d+s+s; s+s+s: 6.
//   - 3g+3g: 1. One 3g: the other half holds two halves each of 2g, d or s+s
//     (a lone s can always take a second s): 6 unordered pairs.
//   - Only 2g/d/s: 2g fits H0..H2, d anywhere, s twice in H0..H2 but once in
//     H3 (slice 7 has no 1g placement); with a 2g-count of 3, 2, 1, 0 there are
//     2, 3, 4 and 5 maximal layouts: 14.
//
// Total 28. For comparison, nebuly-ai/nos's hand-transcribed A100-40GB list
// (without 1g.10gb) omits 4g+3g and 3g+4x1g and keeps two non-maximal rows;
// NVIDIA's placement rules allow 4g+3g, and it runs on A800 80GB in the wild.
var a100x40Maximal = []string{
	"7g.40gb:1",
	"4g.20gb:1,3g.20gb:1",
	"4g.20gb:1,2g.10gb:1,1g.10gb:1",
	"4g.20gb:1,2g.10gb:1,1g.5gb:1",
	"4g.20gb:1,1g.10gb:2",
	"4g.20gb:1,1g.10gb:1,1g.5gb:2",
	"4g.20gb:1,1g.5gb:3",
	"3g.20gb:2",
	"3g.20gb:1,2g.10gb:2",
	"3g.20gb:1,2g.10gb:1,1g.10gb:1",
	"3g.20gb:1,2g.10gb:1,1g.5gb:2",
	"3g.20gb:1,1g.10gb:2",
	"3g.20gb:1,1g.10gb:1,1g.5gb:2",
	"3g.20gb:1,1g.5gb:4",
	"2g.10gb:3,1g.10gb:1",
	"2g.10gb:3,1g.5gb:1",
	"2g.10gb:2,1g.10gb:2",
	"2g.10gb:2,1g.10gb:1,1g.5gb:2",
	"2g.10gb:2,1g.5gb:3",
	"2g.10gb:1,1g.10gb:3",
	"2g.10gb:1,1g.10gb:2,1g.5gb:2",
	"2g.10gb:1,1g.10gb:1,1g.5gb:4",
	"2g.10gb:1,1g.5gb:5",
	"1g.10gb:4",
	"1g.10gb:3,1g.5gb:2",
	"1g.10gb:2,1g.5gb:4",
	"1g.10gb:1,1g.5gb:6",
	"1g.5gb:7",
}

// H100-80GB has the A100 geometry under other names.
var h100x80Maximal = []string{
	"7g.80gb:1",
	"4g.40gb:1,3g.40gb:1",
	"4g.40gb:1,2g.20gb:1,1g.20gb:1",
	"4g.40gb:1,2g.20gb:1,1g.10gb:1",
	"4g.40gb:1,1g.20gb:2",
	"4g.40gb:1,1g.20gb:1,1g.10gb:2",
	"4g.40gb:1,1g.10gb:3",
	"3g.40gb:2",
	"3g.40gb:1,2g.20gb:2",
	"3g.40gb:1,2g.20gb:1,1g.20gb:1",
	"3g.40gb:1,2g.20gb:1,1g.10gb:2",
	"3g.40gb:1,1g.20gb:2",
	"3g.40gb:1,1g.20gb:1,1g.10gb:2",
	"3g.40gb:1,1g.10gb:4",
	"2g.20gb:3,1g.20gb:1",
	"2g.20gb:3,1g.10gb:1",
	"2g.20gb:2,1g.20gb:2",
	"2g.20gb:2,1g.20gb:1,1g.10gb:2",
	"2g.20gb:2,1g.10gb:3",
	"2g.20gb:1,1g.20gb:3",
	"2g.20gb:1,1g.20gb:2,1g.10gb:2",
	"2g.20gb:1,1g.20gb:1,1g.10gb:4",
	"2g.20gb:1,1g.10gb:5",
	"1g.20gb:4",
	"1g.20gb:3,1g.10gb:2",
	"1g.20gb:2,1g.10gb:4",
	"1g.20gb:1,1g.10gb:6",
	"1g.10gb:7",
}

// A30: 4 memory and compute slices. With media extensions allowed, one +me
// instance replaces its plain twin in each layout that holds one (never both
// +me profiles together).
var (
	a30Maximal = []string{
		"4g.24gb:1",
		"2g.12gb:2",
		"2g.12gb:1,1g.6gb:2",
		"1g.6gb:4",
	}
	a30MaximalWithME = []string{
		"4g.24gb:1",
		"2g.12gb:2",
		"2g.12gb:1,2g.12gb+me:1",
		"2g.12gb:1,1g.6gb:2",
		"2g.12gb:1,1g.6gb:1,1g.6gb+me:1",
		"2g.12gb+me:1,1g.6gb:2",
		"1g.6gb:4",
		"1g.6gb:3,1g.6gb+me:1",
	}
)

func layoutStrings(ls []Layout) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}

func TestMaximalLayoutsExplicit(t *testing.T) {
	tests := []struct {
		product string
		allowed []string
		want    []string
	}{
		{"A100-40GB", nil, a100x40Maximal},
		{"H100-80GB", nil, h100x80Maximal},
		{"A100-80GB", nil, h100x80Maximal},
		{"A30-24GB", nil, a30Maximal},
		{"A30-24GB", []string{"4g.24gb", "2g.12gb", "2g.12gb+me", "1g.6gb", "1g.6gb+me"}, a30MaximalWithME},
		// A policy catalog restricts the enumeration.
		{"H200-141GB", []string{"1g.18gb", "3g.71gb"}, []string{"3g.71gb:2", "3g.71gb:1,1g.18gb:4", "1g.18gb:7"}},
		{"H200-141GB", []string{"2g.35gb"}, []string{"2g.35gb:3"}},
		{"H100-80GB", []string{"7g.79gb", "4g.39gb", "3g.39gb"}, []string{"7g.80gb:1", "4g.40gb:1,3g.40gb:1", "3g.40gb:2"}},
		{"H100-80GB", []string{"4g.40gb", "1g.20gb"}, []string{"4g.40gb:1,1g.20gb:2", "1g.20gb:4"}},
		{"H100-80GB", []string{}, []string{""}},
		{"H100-80GB", []string{"nonsense"}, []string{""}},
	}
	for _, tt := range tests {
		p := mustProduct(t, tt.product)
		got := layoutStrings(p.MaximalLayoutsOf(tt.allowed))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s.MaximalLayoutsOf(%v):\n got %d: %s\nwant %d: %s", tt.product, tt.allowed,
				len(got), strings.Join(got, " | "), len(tt.want), strings.Join(tt.want, " | "))
		}
	}
}

func TestMaximalLayoutCounts(t *testing.T) {
	// Without +me profiles (the default) and with every profile.
	want := map[string][2]int{
		"A30-24GB":   {4, 8},
		"A100-40GB":  {28, 44},
		"A100-80GB":  {28, 44},
		"H100-80GB":  {28, 44},
		"H200-141GB": {28, 44},
		"B200":       {28, 44},
		// The later 8-slice parts share the A100's geometry.
		"H100-94GB": {28, 44}, "H100-96GB": {28, 44}, "GH200-144GB": {28, 44},
		"GB200": {28, 44}, "B300": {28, 44}, "GB300": {28, 44},
		// Plain profiles as the A30; the variants multiply the rest.
		"RTX-PRO-6000-Blackwell": {4, 45},
	}
	for _, p := range Products() {
		def, all := len(p.MaximalLayouts()), len(p.MaximalLayoutsOf(p.ProfileNames()))
		if w := want[p.Name]; def != w[0] || all != w[1] {
			t.Errorf("%s: %d maximal layouts (%d with +me), want %d (%d)", p.Name, def, all, w[0], w[1])
		}
	}
}

func TestMaximalLayoutsAreMaximal(t *testing.T) {
	for _, p := range Products() {
		for _, allowed := range [][]string{nil, p.ProfileNames()} {
			maximal := p.MaximalLayoutsOf(allowed)
			names := allowed
			if names == nil {
				for _, pr := range p.Profiles {
					if !pr.Special() {
						names = append(names, pr.Name)
					}
				}
			}
			for _, l := range maximal {
				if !p.Fits(l) {
					t.Errorf("%s: maximal layout %v does not fit", p.Name, l)
				}
				for _, n := range names {
					bigger := l.Clone()
					bigger[n]++
					if p.Fits(bigger) {
						t.Errorf("%s: maximal layout %v extends with %s", p.Name, l, n)
					}
				}
			}
			// Every layout that fits lies under some maximal layout.
			for key := range bruteForce(t, p).configs {
				l := mustLayout(t, key)
				if !onlyNames(l, names) {
					continue
				}
				if !slices.ContainsFunc(maximal, func(m Layout) bool { return subLayout(l, m) }) {
					t.Errorf("%s: fitting layout %v is under no maximal layout", p.Name, l)
				}
			}
			// Deterministic and fresh on every call.
			again := p.MaximalLayoutsOf(allowed)
			if !slices.Equal(layoutStrings(again), layoutStrings(maximal)) {
				t.Errorf("%s: MaximalLayouts order changed between calls", p.Name)
			}
			if len(again) > 0 {
				again[0]["tampered"] = 1
				if strings.Contains(p.MaximalLayoutsOf(allowed)[0].String(), "tampered") {
					t.Errorf("%s: MaximalLayouts returns the cached maps", p.Name)
				}
			}
		}
	}
}

func onlyNames(l Layout, names []string) bool {
	for n, c := range l {
		if c > 0 && !slices.Contains(names, n) {
			return false
		}
	}
	return true
}

func subLayout(a, b Layout) bool {
	for n, c := range a {
		if c > b[n] {
			return false
		}
	}
	return true
}

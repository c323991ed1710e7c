package mig

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// inst parses "3g.40gb@4" into an instance; the size comes from the product.
func inst(t testing.TB, p *Product, s string) Instance {
	t.Helper()
	name, at, ok := strings.Cut(s, "@")
	if !ok {
		t.Fatalf("bad instance %q", s)
	}
	var start int
	if _, err := fmt.Sscan(at, &start); err != nil {
		t.Fatalf("bad instance %q: %v", s, err)
	}
	size := 1
	if pr, ok := p.Profile(name); ok {
		size = pr.MemorySlices
	}
	return Instance{Profile: name, Placement: Placement{Start: start, Size: size}}
}

func insts(t testing.TB, p *Product, ss ...string) []Instance {
	t.Helper()
	var out []Instance
	for _, s := range ss {
		out = append(out, inst(t, p, s))
	}
	return out
}

func instText(in []Instance) string {
	var parts []string
	for _, i := range in {
		parts = append(parts, fmt.Sprintf("%s@%d", i.Profile, i.Placement.Start))
	}
	return strings.Join(parts, " ")
}

func mustLayout(t testing.TB, s string) Layout {
	t.Helper()
	l, err := ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tinyProduct exercises limits the built-in tables cannot reach: a profile
// allowed more instances than it has placements, and one whose placements
// always collide with another's.
func tinyProduct(t testing.TB) *Product {
	t.Helper()
	p, err := NewProductFromProfiles("Tiny", 4, 4, []Profile{
		{ID: GIProfile2Slice, Name: "2g.2gb", ComputeSlices: 2, Placements: placements(2, 1)},
		{ID: GIProfile1Slice, Name: "1g.1gb", ComputeSlices: 1, MaxCount: 3, Placements: placements(1, 1, 2)},
		{ID: GIProfile1SliceRev2, Name: "1g.2gb", ComputeSlices: 1, Placements: placements(2, 0, 2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlace(t *testing.T) {
	tests := []struct {
		product string
		want    string
		fixed   []string
		placed  string // "" with wantErr
		wantErr string
		raw     Layout // used instead of want when set: layouts ParseLayout refuses
	}{
		// 4g+3g has exactly one arrangement.
		{product: "H100-80GB", want: "4g.40gb:1,3g.40gb:1", placed: "4g.40gb@0 3g.40gb@4"},
		{product: "A100-40GB", want: "4g.20gb:1,3g.20gb:1", placed: "4g.20gb@0 3g.20gb@4"},
		{product: "H100-80GB", want: "3g.40gb:2", placed: "3g.40gb@0 3g.40gb@4"},
		{product: "H100-80GB", want: "2g.20gb:3,1g.10gb:1", placed: "2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.10gb@6"},
		{product: "H100-80GB", want: "2g.20gb:3,1g.20gb:1", placed: "2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.20gb@6"},
		{product: "H100-80GB", want: "1g.20gb:4", placed: "1g.20gb@0 1g.20gb@2 1g.20gb@4 1g.20gb@6"},
		{product: "H100-80GB", want: "1g.10gb:7", placed: "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"},
		{product: "H100-80GB", want: "7g.80gb:1", placed: "7g.80gb@0"},
		{product: "H100-80GB", want: "", placed: ""},
		// The search backtracks: 3g@0 leaves no room, so 3g moves to 4.
		{product: "H100-80GB", want: "3g.40gb:1,1g.10gb:4", placed: "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4"},
		{product: "H100-80GB", want: "3g.40gb:1,2g.20gb:2", placed: "2g.20gb@0 2g.20gb@2 3g.40gb@4"},
		{product: "H100-80GB", want: "1g.10gb:6,1g.20gb:1", placed: "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.20gb@6"},
		{product: "H200-141GB", want: "3g.71gb:1,2g.35gb:1,1g.18gb:2", placed: "2g.35gb@0 1g.18gb@2 1g.18gb@3 3g.71gb@4"},
		{product: "B200", want: "4g.90gb:1,2g.45gb:1,1g.23gb+me:1", placed: "4g.90gb@0 2g.45gb@4 1g.23gb+me@6"},
		// Aliases in the wanted layout come back canonical.
		{product: "H100-80GB", want: "7g.79gb:1", placed: "7g.80gb@0"},
		{product: "A100-80GB", want: "3g.39gb:1,4g.39gb:1", placed: "4g.40gb@0 3g.40gb@4"},
		// A30.
		{product: "A30-24GB", want: "4g.24gb:1", placed: "4g.24gb@0"},
		{product: "A30-24GB", want: "2g.12gb:2", placed: "2g.12gb@0 2g.12gb@2"},
		{product: "A30-24GB", want: "2g.12gb:1,1g.6gb:2", placed: "2g.12gb@0 1g.6gb@2 1g.6gb@3"},
		{product: "A30-24GB", want: "1g.6gb:4", placed: "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3"},
		{product: "A30-24GB", want: "2g.12gb+me:1,2g.12gb:1", placed: "2g.12gb@0 2g.12gb+me@2"},
		{product: "A30-24GB", want: "1g.6gb+me:1,1g.6gb:3", placed: "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb+me@3"},
		{product: "A30-24GB", want: "1g.6gb:5", wantErr: "1g.6gb x5 does not fit an A30-24GB: at most 4"},
		{product: "A30-24GB", want: "2g.12gb:3", wantErr: "2g.12gb x3 does not fit an A30-24GB: at most 2"},
		{product: "A30-24GB", want: "2g.12gb+me:1,1g.6gb+me:1", wantErr: "2g.12gb+me x1 and 1g.6gb+me x1 do not fit an A30-24GB: at most one media-extension (+me) instance per GPU"},
		{product: "A30-24GB", want: "4g.24gb:1,1g.6gb:1", wantErr: "4g.24gb:1,1g.6gb:1 needs 5 compute slices, an A30-24GB has 4"},
		{product: "A30-24GB", want: "3g.12gb:1", wantErr: `unknown MIG profile "3g.12gb" for A30-24GB (known: 4g.24gb, 2g.12gb, 2g.12gb+me, 1g.6gb, 1g.6gb+me)`},
		// Limits.
		{product: "H100-80GB", want: "1g.10gb:8", wantErr: "1g.10gb x8 does not fit an H100-80GB: at most 7"},
		{product: "H200-141GB", want: "3g.71gb:3", wantErr: "3g.71gb x3 does not fit an H200-141GB: at most 2"},
		{product: "H100-80GB", want: "1g.10gb+me:2", wantErr: "1g.10gb+me x2 does not fit an H100-80GB: at most 1"},
		{product: "H100-80GB", want: "4g.40gb:1,2g.20gb:2", wantErr: "4g.40gb:1,2g.20gb:2 needs 8 compute slices, an H100-80GB has 7"},
		{product: "H100-80GB", want: "1g.10gb:6,2g.20gb:1", wantErr: "2g.20gb:1,1g.10gb:6 needs 8 compute slices, an H100-80GB has 7"},
		{product: "H100-80GB", want: "3g.40gb:1,2g.20gb:1,1g.20gb:1,1g.10gb:1", wantErr: "needs 9 memory slices, an H100-80GB has 8"},
		{product: "H100-80GB", want: "4g.40gb:1,1g.20gb:3", wantErr: "needs 10 memory slices, an H100-80GB has 8"},
		{product: "H100-80GB", want: "1g.10gb:-1", raw: Layout{"1g.10gb": -1}, wantErr: "negative count -1 for 1g.10gb"},
		{product: "H100-80GB", want: "1g.10gb:huge", raw: Layout{"1g.10gb": math.MaxInt}, wantErr: "does not fit an H100-80GB: at most 7"},
		{product: "H100-80GB", want: "1g.10gb:huge,1g.20gb:1", raw: Layout{"1g.10gb": math.MaxInt, "1g.20gb": 1}, wantErr: "at most 7"},
		// Busy instances stay where they are.
		{product: "H100-80GB", want: "3g.40gb:1,1g.10gb:1", fixed: []string{"1g.10gb@2"}, placed: "1g.10gb@2 3g.40gb@4"},
		{product: "H100-80GB", want: "2g.20gb:2,1g.10gb:3", fixed: []string{"2g.20gb@2", "1g.10gb@6"}, placed: "2g.20gb@0 2g.20gb@2 1g.10gb@4 1g.10gb@5 1g.10gb@6"},
		{product: "H100-80GB", want: "1g.10gb:2", fixed: []string{"1g.10gb@6", "1g.10gb@3"}, placed: "1g.10gb@3 1g.10gb@6"},
		{product: "H100-80GB", want: "7g.80gb:1", fixed: []string{"7g.79gb@0"}, placed: "7g.80gb@0"},
		{product: "H100-80GB", want: "4g.40gb:1,1g.10gb:1", fixed: []string{"1g.10gb@2"},
			wantErr: "4g.40gb needs memory slices 0-3, occupied by busy 1g.10gb at slice 2"},
		{product: "H100-80GB", want: "7g.80gb:1,1g.10gb:1", fixed: []string{"1g.10gb@2"},
			wantErr: "7g.80gb:1,1g.10gb:1 needs 8 compute slices, an H100-80GB has 7"},
		{product: "H100-80GB", want: "3g.40gb:2,1g.10gb:1", fixed: []string{"1g.10gb@2"},
			wantErr: "needs 9 memory slices"},
		{product: "H100-80GB", want: "3g.40gb:2", fixed: []string{"3g.40gb@4"}, placed: "3g.40gb@0 3g.40gb@4"},
		{product: "H100-80GB", want: "3g.40gb:1,1g.10gb:2", fixed: []string{"1g.10gb@2", "1g.10gb@5"},
			wantErr: "3g.40gb needs memory slices 0-3 or 4-7, occupied by busy 1g.10gb at slice 2 and busy 1g.10gb at slice 5"},
		{product: "H100-80GB", want: "2g.20gb:3,1g.10gb:1", fixed: []string{"1g.10gb@1"},
			wantErr: "2g.20gb x3 needs 3 free placements among memory slices 0-1, 2-3, 4-5, but only 2-3 and 4-5 are free next to busy 1g.10gb at slice 1"},
		{product: "H100-80GB", want: "2g.20gb:1,1g.20gb:2,1g.10gb:2", fixed: []string{"1g.10gb@3", "1g.10gb@5"},
			wantErr: "2g.20gb:1,1g.20gb:2,1g.10gb:2 does not fit an H100-80GB around busy 1g.10gb at slice 3, busy 1g.10gb at slice 5: the other instances have no allowed placements within free memory slices 0,1,2,4,6,7"},
		{product: "H100-80GB", want: "1g.10gb:1", fixed: []string{"1g.10gb@2", "1g.10gb@4"},
			wantErr: "layout 1g.10gb:1 has 1g.10gb x1, fewer than the 2 busy 1g.10gb instances that cannot move"},
		{product: "H100-80GB", want: "1g.10gb:2,2g.20gb:1", fixed: []string{"2g.20gb@2", "1g.10gb@3"},
			wantErr: "busy 1g.10gb at slice 3 overlaps busy 2g.20gb at slices 2-3"},
		{product: "H100-80GB", want: "1g.20gb:1", fixed: []string{"1g.20gb@1"},
			wantErr: "busy 1g.20gb at slices 1-2 is not an allowed placement on an H100-80GB (allowed memory slices: 0-1, 2-3, 4-5, 6-7)"},
		{product: "H100-80GB", want: "1g.10gb:1", fixed: []string{"1g.10gb@7"},
			wantErr: "busy 1g.10gb at slice 7 is not an allowed placement"},
		{product: "H100-80GB", want: "1g.10gb:1", fixed: []string{"1g.18gb@0"},
			wantErr: `busy instance: unknown MIG profile "1g.18gb" for H100-80GB`},
	}
	for _, tt := range tests {
		name := tt.product + "/" + tt.want
		if len(tt.fixed) > 0 {
			name += "/busy=" + strings.Join(tt.fixed, ",")
		}
		t.Run(name, func(t *testing.T) {
			p := mustProduct(t, tt.product)
			want := tt.raw
			if want == nil {
				want = mustLayout(t, tt.want)
			}
			fixed := insts(t, p, tt.fixed...)
			got, err := p.Place(want, fixed)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Place = %s, want error %q", instText(got), tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Place error = %q, want %q", err, tt.wantErr)
				}
				if len(fixed) == 0 && p.Fits(want) {
					t.Errorf("Fits = true but Place failed")
				}
				return
			}
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			if s := instText(got); s != tt.placed {
				t.Errorf("Place = %s\n            want %s", s, tt.placed)
			}
			if err := p.Validate(got); err != nil {
				t.Errorf("Validate(Place()) = %v", err)
			}
			if len(fixed) == 0 && !p.Fits(want) {
				t.Errorf("Fits = false but Place succeeded")
			}
		})
	}
}

func TestPlaceSpecificErrorTexts(t *testing.T) {
	// Limits the built-in tables cannot reach.
	p := tinyProduct(t)
	if _, err := p.Place(Layout{"2g.2gb": 1, "1g.1gb": 1}, nil); err == nil ||
		err.Error() != "2g.2gb:1,1g.1gb:1 does not fit a Tiny: no choice of allowed placements keeps the instances off each other's memory slices" {
		t.Errorf("Place error = %v", err)
	}
	if _, err := p.Place(Layout{"1g.2gb": 3}, nil); err == nil ||
		err.Error() != "1g.2gb x3 does not fit a Tiny: at most 2" {
		t.Errorf("Place error = %v", err)
	}
	if _, err := p.Place(Layout{"1g.1gb": 3}, nil); err == nil ||
		err.Error() != "1g.1gb x3 does not fit a Tiny: it has only 2 placements for 1g.1gb" {
		t.Errorf("Place error = %v", err)
	}
	if err := p.Validate(insts(t, p, "1g.1gb@1", "1g.2gb@2")); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if err := p.Validate(insts(t, p, "1g.2gb@0", "1g.2gb@2", "1g.1gb@1")); err == nil ||
		err.Error() != "1g.1gb at slice 1 overlaps 1g.2gb at slices 0-1" {
		t.Errorf("Validate error = %v", err)
	}
	// Compute runs out before memory on this product.
	big, err := NewProductFromProfiles("Narrow", 4, 2, []Profile{
		{ID: GIProfile1Slice, Name: "1g.1gb", ComputeSlices: 1, Placements: placements(1, 0, 1, 2, 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Validate(insts(t, big, "1g.1gb@0", "1g.1gb@1", "1g.1gb@2")); err == nil ||
		err.Error() != "1g.1gb:3 needs 3 compute slices, a Narrow has 2" {
		t.Errorf("Validate error = %v", err)
	}
	if got := big.Addable(insts(t, big, "1g.1gb@0", "1g.1gb@1"), nil); len(got) != 0 {
		t.Errorf("Addable with compute exhausted = %v", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		product string
		in      []string
		wantErr string
	}{
		{"H100-80GB", nil, ""},
		{"H100-80GB", []string{"4g.40gb@0", "3g.40gb@4"}, ""},
		{"H100-80GB", []string{"3g.40gb@4", "1g.10gb@0", "1g.10gb@1", "1g.10gb+me@2", "1g.10gb@3"}, ""},
		{"H100-80GB", []string{"7g.79gb@0"}, ""},
		{"H100-80GB", []string{"4g.40gb@0", "1g.10gb@2"}, "1g.10gb at slice 2 overlaps 4g.40gb at slices 0-3"},
		{"H100-80GB", []string{"1g.20gb@1"}, "1g.20gb at slices 1-2 is not an allowed placement on an H100-80GB (allowed memory slices: 0-1, 2-3, 4-5, 6-7)"},
		{"H100-80GB", []string{"1g.10gb@7"}, "1g.10gb at slice 7 is not an allowed placement on an H100-80GB (allowed memory slices: 0, 1, 2, 3, 4, 5, 6)"},
		{"H100-80GB", []string{"4g.40gb@4"}, "4g.40gb at slices 4-7 is not an allowed placement"},
		{"H100-80GB", []string{"2g.20gb@6"}, "2g.20gb at slices 6-7 is not an allowed placement"},
		{"H100-80GB", []string{"1g.10gb+me@0", "1g.10gb+me@1"}, "1g.10gb+me x2 does not fit an H100-80GB: at most 1"},
		{"H100-80GB", []string{"3g.71gb@0"}, `unknown MIG profile "3g.71gb" for H100-80GB`},
		{"A30-24GB", []string{"2g.12gb+me@2", "1g.6gb+me@0"}, "2g.12gb+me x1 and 1g.6gb+me x1 do not fit an A30-24GB: at most one media-extension (+me) instance per GPU"},
		{"A30-24GB", []string{"2g.12gb@2", "1g.6gb+me@0", "1g.6gb@1"}, ""},
		{"A30-24GB", []string{"4g.24gb@0", "1g.6gb@3"}, "1g.6gb at slice 3 overlaps 4g.24gb at slices 0-3"},
	}
	for _, tt := range tests {
		p := mustProduct(t, tt.product)
		err := p.Validate(insts(t, p, tt.in...))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s.Validate(%v) = %v", tt.product, tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s.Validate(%v) = %v, want %q", tt.product, tt.in, err, tt.wantErr)
		}
	}
	// A 3g spanning three memory slices (the go-nvml H100 mock) is refused.
	p := mustProduct(t, "H100-80GB")
	err := p.Validate([]Instance{{Profile: "3g.40gb", Placement: Placement{Start: 0, Size: 3}}})
	if err == nil || !strings.Contains(err.Error(), "3g.40gb at slices 0-2 is not an allowed placement") {
		t.Errorf("Validate(3g size 3) = %v", err)
	}
}

func TestFreeMemoryAndAddable(t *testing.T) {
	h100 := mustProduct(t, "H100-80GB")
	all := h100.ProfileNames()
	tests := []struct {
		name     string
		product  string
		in       []string
		allowed  []string
		free     int
		wantAdds []string
	}{
		{"empty", "H100-80GB", nil, nil, 8, all},
		{"empty, none allowed", "H100-80GB", nil, []string{}, 8, nil},
		// Seven 1g leave slice 7 free but no compute to use it.
		{"seven 1g", "H100-80GB", []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}, nil, 1, nil},
		{"six 1g", "H100-80GB", []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5"}, nil, 2,
			[]string{"1g.20gb", "1g.10gb", "1g.10gb+me"}},
		{"busy 1g at 2", "H100-80GB", []string{"1g.10gb@2"}, nil, 7,
			[]string{"3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", "1g.10gb+me"}},
		{"busy 1g at 2, subset with alias and unknown", "H100-80GB", []string{"1g.10gb@2"},
			[]string{"7g.79gb", "4g.40gb", "3g.39gb", "5g.50gb", "3g.40gb"}, 7, []string{"3g.40gb"}},
		{"4g+3g", "H100-80GB", []string{"4g.40gb@0", "3g.40gb@4"}, nil, 0, nil},
		{"3g at 0", "H100-80GB", []string{"3g.40gb@0"}, nil, 4,
			[]string{"3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", "1g.10gb+me"}},
		{"+me taken", "H100-80GB", []string{"1g.10gb+me@6"}, nil, 7,
			[]string{"4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb"}},
		{"3g max reached", "H100-80GB", []string{"3g.40gb@0", "2g.20gb@4"}, []string{"3g.40gb", "1g.10gb"}, 2, []string{"1g.10gb"}},
		{"A30 2g+me", "A30-24GB", []string{"2g.12gb+me@0"}, nil, 2, []string{"2g.12gb", "1g.6gb"}},
		{"A30 full", "A30-24GB", []string{"4g.24gb@0"}, nil, 0, nil},
		// Unknown instances still hold their memory.
		{"unknown instance", "H100-80GB", []string{"9g.99gb@0"}, []string{"7g.80gb", "1g.10gb"}, 7, []string{"1g.10gb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustProduct(t, tt.product)
			in := insts(t, p, tt.in...)
			if got := p.FreeMemorySlices(in); got != tt.free {
				t.Errorf("FreeMemorySlices = %d, want %d", got, tt.free)
			}
			if got := p.Addable(in, tt.allowed); !slices.Equal(got, tt.wantAdds) {
				t.Errorf("Addable = %v, want %v", got, tt.wantAdds)
			}
		})
	}
	// A clipped placement outside the GPU does not count beyond it.
	if got := h100.FreeMemorySlices([]Instance{{Profile: "x", Placement: Placement{Start: 6, Size: 5}}}); got != 6 {
		t.Errorf("FreeMemorySlices(clipped) = %d, want 6", got)
	}
}

func TestCanonical(t *testing.T) {
	p := mustProduct(t, "H100-80GB")
	tests := []struct {
		in      Layout
		want    string
		wantErr string
	}{
		{Layout{}, "", ""},
		{Layout{"7g.79gb": 1}, "7g.80gb:1", ""},
		{Layout{"3g.39gb": 1, "3g.40gb": 1}, "3g.40gb:2", ""},
		{Layout{"1g.10gb": 0, "nvidia.com/mig-1g.10gb.me": 1}, "1g.10gb+me:1", ""},
		{Layout{"5g.50gb": 1, "1g.10gb": 1}, "", `unknown MIG profile "5g.50gb" for H100-80GB (known: 7g.80gb, 4g.40gb, 3g.40gb, 2g.20gb, 1g.20gb, 1g.10gb, 1g.10gb+me)`},
		{Layout{"1g.10gb": -2}, "", "negative count -2 for 1g.10gb"},
		{Layout{"5g.50gb": 0}, "", ""},
	}
	for _, tt := range tests {
		got, err := p.Canonical(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Canonical(%v) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("Canonical(%v) = %v, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestFits(t *testing.T) {
	tests := []struct {
		product string
		want    string
		fits    bool
	}{
		{"H100-80GB", "4g.40gb:1,3g.40gb:1", true},
		{"H100-80GB", "3g.40gb:2", true},
		{"H100-80GB", "3g.40gb:2,1g.10gb:1", false},
		{"H100-80GB", "1g.10gb:7", true},
		{"H100-80GB", "1g.10gb:8", false},
		{"H100-80GB", "1g.20gb:4", true},
		{"H100-80GB", "1g.20gb:4,1g.10gb:1", false},
		{"H100-80GB", "7g.79gb:1", true},
		{"H100-80GB", "unknown:1", false},
		{"H100-80GB", "1g.10gb:6,1g.10gb+me:1", true},
		{"A100-40GB", "3g.20gb:1,1g.5gb:4", true},
		{"A100-40GB", "2g.10gb:3,1g.10gb:1", true},
		{"A30-24GB", "2g.12gb:1,1g.6gb:1,1g.6gb+me:1", true},
		{"A30-24GB", "2g.12gb+me:1,1g.6gb+me:1", false},
	}
	for _, tt := range tests {
		p := mustProduct(t, tt.product)
		if got := p.Fits(mustLayout(t, tt.want)); got != tt.fits {
			t.Errorf("%s.Fits(%s) = %v, want %v", tt.product, tt.want, got, tt.fits)
		}
	}
}

package mig

import (
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
)

// bruteTable lists every valid placed configuration of a product, found the
// dumb way: every subset of (profile, placement) pairs whose memory ranges do
// not overlap, filtered by the limits read straight off the Profile fields.
// It shares no code with the search, so agreeing with it means something.
type bruteTable struct {
	configs map[string][][]Instance // Layout.String() -> configurations with that multiset
	keys    []string                // sorted keys, for deterministic sampling
}

var bruteCache sync.Map // *Product -> *bruteTable

func bruteForce(t testing.TB, p *Product) *bruteTable {
	t.Helper()
	if v, ok := bruteCache.Load(p); ok {
		return v.(*bruteTable)
	}
	type cand struct {
		prof int
		pl   Placement
	}
	var cands []cand
	for i, pr := range p.Profiles {
		for _, pl := range pr.Placements {
			cands = append(cands, cand{i, pl})
		}
	}
	bt := &bruteTable{configs: map[string][][]Instance{}}
	occupied := make([]bool, p.MemorySlices)
	count := make([]int, len(p.Profiles))
	var cur []cand
	var rec func(k, compute int)
	rec = func(k, compute int) {
		if k == len(cands) {
			// The media rule, spelled out: one +me at most, one +me.all at
			// most, and beside a +me.all only -me instances.
			plusMe, allMe, withMedia := 0, 0, 0
			for _, c := range cur {
				switch p.Profiles[c.prof].Media {
				case MediaExtensions:
					plusMe++
				case MediaAll:
					allMe++
				case MediaShare:
					withMedia++
				}
			}
			if plusMe > 1 || allMe > 1 || allMe == 1 && plusMe+withMedia > 0 {
				return
			}
			l := Layout{}
			var config []Instance
			for _, c := range cur {
				l[p.Profiles[c.prof].Name]++
				config = append(config, Instance{p.Profiles[c.prof].Name, c.pl})
			}
			key := l.String()
			bt.configs[key] = append(bt.configs[key], config)
			return
		}
		rec(k+1, compute)
		c := cands[k]
		pr := &p.Profiles[c.prof]
		if count[c.prof]+1 > pr.MaxCount || compute+pr.ComputeSlices > p.ComputeSlices {
			return
		}
		for s := c.pl.Start; s < c.pl.Start+c.pl.Size; s++ {
			if occupied[s] {
				return
			}
		}
		for s := c.pl.Start; s < c.pl.Start+c.pl.Size; s++ {
			occupied[s] = true
		}
		count[c.prof]++
		cur = append(cur, c)
		rec(k+1, compute+pr.ComputeSlices)
		cur = cur[:len(cur)-1]
		count[c.prof]--
		for s := c.pl.Start; s < c.pl.Start+c.pl.Size; s++ {
			occupied[s] = false
		}
	}
	rec(0, 0)
	for k := range bt.configs {
		bt.keys = append(bt.keys, k)
	}
	sort.Strings(bt.keys)
	v, _ := bruteCache.LoadOrStore(p, bt)
	return v.(*bruteTable)
}

// feasible reports whether some configuration with multiset key contains
// every fixed instance (as a multiset: a repeated busy instance never fits).
func (bt *bruteTable) feasible(key string, fixed []Instance) bool {
	for _, config := range bt.configs[key] {
		used := make([]bool, len(config))
		ok := true
		for _, f := range fixed {
			j := slices.IndexFunc(config, func(in Instance) bool { return in == f })
			for j >= 0 && used[j] {
				next := slices.IndexFunc(config[j+1:], func(in Instance) bool { return in == f })
				if next < 0 {
					j = -1
				} else {
					j += 1 + next
				}
			}
			if j < 0 {
				ok = false
				break
			}
			used[j] = true
		}
		if ok {
			return true
		}
	}
	return false
}

// checkPlaced asserts what every successful Place must satisfy.
func checkPlaced(t testing.TB, p *Product, want Layout, fixed, got []Instance) {
	t.Helper()
	if err := p.Validate(got); err != nil {
		t.Fatalf("%s: Place(%v, %v) = %v fails Validate: %v", p.Name, want, fixed, got, err)
	}
	canon, err := p.Canonical(want)
	if err != nil {
		t.Fatalf("%s: Place accepted %v but Canonical: %v", p.Name, want, err)
	}
	have := Layout{}
	for _, in := range got {
		have[in.Profile]++
	}
	if !have.Equal(canon) {
		t.Fatalf("%s: Place(%v) placed %v", p.Name, want, have)
	}
	for _, f := range fixed {
		pr, _ := p.Profile(f.Profile)
		if !slices.Contains(got, Instance{pr.Name, f.Placement}) {
			t.Fatalf("%s: Place moved busy %v: %v", p.Name, f, got)
		}
	}
	if !slices.IsSortedFunc(got, func(a, b Instance) int { return a.Placement.Start - b.Placement.Start }) {
		t.Fatalf("%s: Place result not sorted by start: %v", p.Name, got)
	}
}

func randomLayout(r *rand.Rand, p *Product) Layout {
	l := Layout{}
	for _, pr := range p.Profiles {
		if r.IntN(3) == 0 {
			if n := r.IntN(pr.MaxCount + 2); n > 0 {
				l[pr.Name] = n
			}
		}
	}
	return l
}

// TestPlaceMatchesBruteForce: on thousands of seeded random multisets, Place
// succeeds exactly when brute force finds a configuration, every answer
// validates, and the same input gives the same answer.
func TestPlaceMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(20260101, 7))
	for _, p := range Products() {
		bt := bruteForce(t, p)
		fits := 0
		for range 3000 {
			want := randomLayout(r, p)
			key := want.String()
			expect := len(bt.configs[key]) > 0
			got, err := p.Place(want, nil)
			if (err == nil) != expect {
				t.Fatalf("%s: Place(%v) error = %v, brute force says fits=%v", p.Name, want, err, expect)
			}
			if p.Fits(want) != expect {
				t.Fatalf("%s: Fits(%v) = %v, brute force says %v", p.Name, want, !expect, expect)
			}
			if err != nil {
				if err.Error() == "" {
					t.Fatalf("%s: empty error for %v", p.Name, want)
				}
				continue
			}
			fits++
			checkPlaced(t, p, want, nil, got)
			again, _ := p.Place(want.Clone(), nil)
			if !slices.Equal(got, again) {
				t.Fatalf("%s: Place(%v) not deterministic: %v then %v", p.Name, want, got, again)
			}
		}
		if fits < 300 {
			t.Errorf("%s: only %d of 3000 random layouts fit; the sample is too thin", p.Name, fits)
		}
	}
}

// TestPlaceWithBusyMatchesBruteForce draws busy instances from real
// configurations, then asks for that configuration's multiset, sometimes with
// an instance more or less, and compares with brute force.
func TestPlaceWithBusyMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 4242))
	for _, p := range Products() {
		bt := bruteForce(t, p)
		ok, failed := 0, 0
		for range 2000 {
			key := bt.keys[r.IntN(len(bt.keys))]
			configs := bt.configs[key]
			config := configs[r.IntN(len(configs))]
			var fixed []Instance
			for _, in := range config {
				if r.IntN(2) == 0 {
					fixed = append(fixed, in)
				}
			}
			want := mustLayout(t, key)
			switch r.IntN(4) {
			case 0:
				want[p.Profiles[r.IntN(len(p.Profiles))].Name]++
			case 1:
				if len(config) > 0 {
					want[config[r.IntN(len(config))].Profile]--
				}
			}
			want = want.Clone()
			for n, c := range want {
				if c < 0 {
					delete(want, n)
				}
			}
			expect := bt.feasible(want.String(), fixed)
			got, err := p.Place(want, fixed)
			if (err == nil) != expect {
				t.Fatalf("%s: Place(%v, busy %v) error = %v, brute force says fits=%v", p.Name, want, fixed, err, expect)
			}
			if err != nil {
				failed++
				continue
			}
			ok++
			checkPlaced(t, p, want, fixed, got)
			// The order of the busy list does not matter.
			rev := slices.Clone(fixed)
			slices.Reverse(rev)
			again, err := p.Place(want, rev)
			if err != nil || !slices.Equal(got, again) {
				t.Fatalf("%s: Place(%v) depends on busy order: %v vs %v (%v)", p.Name, want, got, again, err)
			}
		}
		if ok < 200 || failed < 200 {
			t.Errorf("%s: %d fits and %d failures; the sample is lopsided", p.Name, ok, failed)
		}
	}
}

// TestAddableMatchesPlace: a profile is addable next to real instances exactly
// when Place can add one instance of it around them.
func TestAddableMatchesPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 99))
	for _, p := range Products() {
		bt := bruteForce(t, p)
		for range 500 {
			key := bt.keys[r.IntN(len(bt.keys))]
			config := bt.configs[key][r.IntN(len(bt.configs[key]))]
			addable := p.Addable(config, nil)
			for _, pr := range p.Profiles {
				want := mustLayout(t, key)
				want[pr.Name]++
				_, err := p.Place(want, config)
				if (err == nil) != slices.Contains(addable, pr.Name) {
					t.Fatalf("%s: around %v, Addable says %v but Place(+%s) error = %v", p.Name, config, addable, pr.Name, err)
				}
			}
		}
	}
}

func FuzzPlace(f *testing.F) {
	f.Add(uint8(4), []byte{0, 0, 1, 0, 0, 2, 0}, []byte{})
	f.Add(uint8(3), []byte{0, 1, 1}, []byte{5, 2})
	f.Add(uint8(0), []byte{1, 1, 1, 1, 1}, []byte{1, 0, 3, 1})
	f.Add(uint8(1), []byte{0, 0, 0, 0, 0, 7}, []byte{5, 0, 5, 0})
	f.Add(uint8(2), []byte{9, 9, 9, 9, 9, 9, 9}, []byte{0, 0, 1, 1, 2, 2})
	f.Fuzz(func(t *testing.T, product uint8, cs, fixedSpec []byte) {
		ps := Products()
		p := ps[int(product)%len(ps)]
		want := Layout{}
		for i, pr := range p.Profiles {
			if i < len(cs) {
				if n := int(cs[i]) % (pr.MaxCount + 2); n > 0 {
					want[pr.Name] = n
				}
			}
		}
		var fixed []Instance
		for k := 0; k+1 < len(fixedSpec) && len(fixed) < 10; k += 2 {
			pr := p.Profiles[int(fixedSpec[k])%len(p.Profiles)]
			pl := pr.Placements[int(fixedSpec[k+1])%len(pr.Placements)]
			if fixedSpec[k+1] >= 200 {
				pl.Start++ // sometimes an illegal placement
			}
			fixed = append(fixed, Instance{pr.Name, pl})
		}
		got, err := p.Place(want, fixed)
		bt := bruteForce(t, p)
		if expect := bt.feasible(want.String(), fixed); (err == nil) != expect {
			t.Fatalf("%s: Place(%v, busy %v) error = %v, brute force says fits=%v", p.Name, want, fixed, err, expect)
		}
		if len(fixed) == 0 && (err == nil) != p.Fits(want) {
			t.Fatalf("%s: Place(%v) error = %v disagrees with Fits", p.Name, want, err)
		}
		if err != nil {
			return
		}
		checkPlaced(t, p, want, fixed, got)
		again, _ := p.Place(want, fixed)
		if !slices.Equal(got, again) {
			t.Fatalf("%s: Place(%v, %v) not deterministic", p.Name, want, fixed)
		}
	})
}

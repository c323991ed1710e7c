package mig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Layout is a multiset of MIG profiles on one GPU: profile name -> instance
// count. It is what mig-parted's config and the RepartitionPlan from/to fields
// carry; counts of zero are ignored everywhere.
type Layout map[string]int

// GPUTarget is what one GPU of a node should look like once a change is done: the planner
// proposes it and a mig-parted config entry describes it.
type GPUTarget struct {
	Index int
	// MIGEnabled is false for a GPU that serves whole-GPU pods; Layout is then empty.
	MIGEnabled bool
	Layout     Layout
}

// Instance is one GPU instance at its real placement.
type Instance struct {
	Profile   string
	Placement Placement
}

// maxLayoutCount bounds a parsed count; no GPU holds more than 16 instances,
// and the bound keeps hostile input from building huge layouts.
const maxLayoutCount = 1000

// parsedName is a profile name split as "<compute>g.<gb>gb<suffix>".
type parsedName struct {
	compute, gb int
	suffix      string
	ok          bool
}

func parseProfileName(s string) parsedName {
	c, rest, ok := leadingInt(s)
	if !ok || !strings.HasPrefix(rest, "g.") {
		return parsedName{}
	}
	gb, rest, ok := leadingInt(rest[2:])
	if !ok || !strings.HasPrefix(rest, "gb") {
		return parsedName{}
	}
	return parsedName{compute: c, gb: gb, suffix: rest[2:], ok: true}
}

func leadingInt(s string) (int, string, bool) {
	n, i := 0, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i < 6 {
		n = n*10 + int(s[i]-'0')
		i++
	}
	return n, s[i:], i > 0
}

// CompareProfileNames orders profile names larger first (compute slices, then
// memory), then by name, so layouts print and iterate the same way everywhere.
// Names that do not read as "<N>g.<M>gb..." sort after those that do.
func CompareProfileNames(a, b string) int {
	pa, pb := parseProfileName(strings.ToLower(a)), parseProfileName(strings.ToLower(b))
	switch {
	case pa.ok != pb.ok:
		if pa.ok {
			return -1
		}
		return 1
	case pa.compute != pb.compute:
		return pb.compute - pa.compute
	case pa.gb != pb.gb:
		return pb.gb - pa.gb
	}
	return strings.Compare(a, b)
}

// ComputeSlices reads the compute slices from a profile name ("3g.71gb" -> 3); a name that
// does not start with a count counts as 1, so that no profile is free.
func ComputeSlices(profile string) int {
	c, _, ok := leadingInt(profile)
	if !ok {
		return 1
	}
	return max(c, 1)
}

// LayoutOf reads a layout as the API carries it (v1alpha1.ProfileCounts, a map[string]int32).
func LayoutOf(counts map[string]int32) Layout {
	out := make(Layout, len(counts))
	for n, c := range counts {
		if c != 0 {
			out[n] = int(c)
		}
	}
	return out
}

// Counts is the layout as the API carries it, zero counts dropped; nil for a nil or empty
// layout, so that an empty from/to is left out of the JSON.
func (l Layout) Counts() map[string]int32 {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]int32, len(l))
	for n, c := range l {
		if c != 0 {
			out[n] = int32(c)
		}
	}
	return out
}

// Names returns the profiles with a non-zero count, in CompareProfileNames order.
func (l Layout) Names() []string {
	out := make([]string, 0, len(l))
	for n, c := range l {
		if c != 0 {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, CompareProfileNames)
	return out
}

// Total is the number of instances in the layout.
func (l Layout) Total() int {
	t := 0
	for _, c := range l {
		t += c
	}
	return t
}

// Clone returns a copy without zero counts.
func (l Layout) Clone() Layout {
	out := make(Layout, len(l))
	for n, c := range l {
		if c != 0 {
			out[n] = c
		}
	}
	return out
}

// String renders the layout as "3g.71gb:1,1g.18gb:3", larger profiles first;
// ParseLayout reads it back. The empty layout renders as "".
func (l Layout) String() string {
	var b strings.Builder
	for i, n := range l.Names() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(l[n]))
	}
	return b.String()
}

// Equal reports whether both layouts hold the same profiles with the same
// counts, ignoring zero counts. Names are compared as written; use
// Product.Canonical first when aliases may be involved.
func (l Layout) Equal(o Layout) bool {
	for n, c := range l {
		if c != 0 && o[n] != c {
			return false
		}
	}
	for n, c := range o {
		if c != 0 && l[n] != c {
			return false
		}
	}
	return true
}

// CompareLayouts orders layouts for deterministic iteration: entries are
// walked in CompareProfileNames order and the layout with the larger profile,
// or the higher count of the same profile, comes first.
func CompareLayouts(a, b Layout) int {
	na, nb := a.Names(), b.Names()
	for i := 0; i < len(na) && i < len(nb); i++ {
		if c := CompareProfileNames(na[i], nb[i]); c != 0 {
			return c
		}
		if ca, cb := a[na[i]], b[nb[i]]; ca != cb {
			if ca > cb {
				return -1
			}
			return 1
		}
	}
	return len(nb) - len(na)
}

// SortLayouts sorts layouts in CompareLayouts order.
func SortLayouts(ls []Layout) { slices.SortStableFunc(ls, CompareLayouts) }

func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '.' || r == '+' || r == '-' || r == '_'
}

// ParseLayout reads "3g.71gb:1,1g.18gb:3" (the String form). It also takes the
// YAML flow form people paste from plans, "{3g.71gb: 1, '1g.18gb': 3}", and a
// bare name for a count of one. A profile listed twice is an error; zero
// counts are dropped. Names are not checked against any product.
func ParseLayout(s string) (Layout, error) {
	body := strings.TrimSpace(s)
	if strings.HasPrefix(body, "{") {
		if !strings.HasSuffix(body, "}") {
			return nil, fmt.Errorf("layout %q: unbalanced braces", s)
		}
		body = strings.TrimSpace(body[1 : len(body)-1])
	}
	l := Layout{}
	if body == "" {
		return l, nil
	}
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(body, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("layout %q: empty entry", s)
		}
		name, num, hasCount := strings.Cut(entry, ":")
		name = unquote(strings.TrimSpace(name))
		if !validName(name) {
			return nil, fmt.Errorf("layout %q: invalid profile name %q", s, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("layout %q: profile %s listed twice", s, name)
		}
		seen[name] = true
		n := 1
		if hasCount {
			num = strings.TrimSpace(num)
			v, err := strconv.Atoi(num)
			if err != nil || v < 0 || v > maxLayoutCount || num[0] == '+' {
				return nil, fmt.Errorf("layout %q: count %q for %s is not a whole number in 0..%d", s, num, name, maxLayoutCount)
			}
			n = v
		}
		if n > 0 {
			l[name] = n
		}
	}
	return l, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// ResourcePrefix starts the device plugin's resource name of every MIG profile.
const ResourcePrefix = "nvidia.com/mig-"

// ResourceName is the extended resource the device plugin advertises for a
// profile under the mixed strategy ("1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me").
func ResourceName(profile string) string {
	return ResourcePrefix + strings.ReplaceAll(profile, "+", ".")
}

// ProfileFromResource undoes ResourceName: it takes "nvidia.com/mig-1g.10gb.me",
// "mig-1g.10gb.me" or "1g.10gb.me" and returns "1g.10gb+me". It reports false
// when the text does not read as a MIG profile.
func ProfileFromResource(resource string) (string, bool) {
	s := strings.TrimPrefix(resource, "nvidia.com/")
	s = strings.TrimPrefix(s, "mig-")
	p := parseProfileName(s)
	if !p.ok {
		return "", false
	}
	if p.suffix == "" {
		return s, true
	}
	if p.suffix[0] != '.' {
		return s, true
	}
	head := s[:len(s)-len(p.suffix)]
	return head + "+" + p.suffix[1:], true
}

package mig

import (
	"slices"
	"strings"
	"testing"
)

func TestLayoutString(t *testing.T) {
	tests := []struct {
		l    Layout
		want string
	}{
		{Layout{}, ""},
		{nil, ""},
		{Layout{"1g.18gb": 3, "3g.71gb": 1}, "3g.71gb:1,1g.18gb:3"},
		{Layout{"1g.18gb": 3, "3g.71gb": 1, "2g.35gb": 0}, "3g.71gb:1,1g.18gb:3"},
		// Same compute: more memory first; same both: by name.
		{Layout{"1g.10gb": 1, "1g.20gb": 2, "1g.10gb+me": 1}, "1g.20gb:2,1g.10gb:1,1g.10gb+me:1"},
		{Layout{"4g.40gb": 1, "7g.80gb": 1, "3g.40gb": 1}, "7g.80gb:1,4g.40gb:1,3g.40gb:1"},
		// Names that are not "<N>g.<M>gb" go last.
		{Layout{"custom": 1, "1g.5gb": 1}, "1g.5gb:1,custom:1"},
	}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.l, got, tt.want)
		}
	}
}

func TestParseLayout(t *testing.T) {
	tests := []struct {
		in      string
		want    Layout
		wantErr string
	}{
		{in: "", want: Layout{}},
		{in: "  ", want: Layout{}},
		{in: "{}", want: Layout{}},
		{in: "3g.71gb:1,1g.18gb:3", want: Layout{"3g.71gb": 1, "1g.18gb": 3}},
		{in: " 3g.71gb : 1 , 1g.18gb:3 ", want: Layout{"3g.71gb": 1, "1g.18gb": 3}},
		{in: `{"1g.18gb": 7}`, want: Layout{"1g.18gb": 7}},
		{in: "{3g.40gb: 1, '2g.20gb': 1, 1g.10gb: 1}", want: Layout{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
		{in: "7g.80gb", want: Layout{"7g.80gb": 1}},
		{in: "1g.10gb+me:1", want: Layout{"1g.10gb+me": 1}},
		{in: "1g.10gb:0,2g.20gb:1", want: Layout{"2g.20gb": 1}},
		{in: "1g.10gb:1,", wantErr: "empty entry"},
		{in: ",", wantErr: "empty entry"},
		{in: "1g.10gb:1,1g.10gb:2", wantErr: "listed twice"},
		{in: "1g.10gb:-1", wantErr: "not a whole number"},
		{in: "1g.10gb:+1", wantErr: "not a whole number"},
		{in: "1g.10gb:x", wantErr: "not a whole number"},
		{in: "1g.10gb:", wantErr: "not a whole number"},
		{in: "1g.10gb:1001", wantErr: "not a whole number"},
		{in: "1g.10gb:99999999999999999999", wantErr: "not a whole number"},
		{in: ":1", wantErr: "invalid profile name"},
		{in: "1g 10gb:1", wantErr: "invalid profile name"},
		{in: "1g.10gb:1:2", wantErr: "not a whole number"},
		{in: "{1g.10gb:1", wantErr: "unbalanced braces"},
	}
	for _, tt := range tests {
		got, err := ParseLayout(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseLayout(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) || len(got) != len(tt.want) {
			t.Errorf("ParseLayout(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestLayoutEqual(t *testing.T) {
	tests := []struct {
		a, b Layout
		want bool
	}{
		{nil, Layout{}, true},
		{Layout{"1g.10gb": 0}, nil, true},
		{Layout{"1g.10gb": 1}, Layout{"1g.10gb": 1, "2g.20gb": 0}, true},
		{Layout{"1g.10gb": 1}, Layout{"1g.10gb": 2}, false},
		{Layout{"1g.10gb": 1}, Layout{"2g.20gb": 1}, false},
		{Layout{"1g.10gb": 1}, Layout{"1g.10gb": 1, "2g.20gb": 1}, false},
	}
	for _, tt := range tests {
		if got := tt.a.Equal(tt.b); got != tt.want {
			t.Errorf("%v.Equal(%v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := tt.b.Equal(tt.a); got != tt.want {
			t.Errorf("%v.Equal(%v) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestLayoutHelpers(t *testing.T) {
	l := Layout{"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 0}
	if got := l.Names(); !slices.Equal(got, []string{"3g.40gb", "1g.10gb"}) {
		t.Errorf("Names() = %v", got)
	}
	if got := l.Total(); got != 3 {
		t.Errorf("Total() = %d", got)
	}
	c := l.Clone()
	c["1g.10gb"] = 5
	if l["1g.10gb"] != 2 || len(c) != 2 {
		t.Errorf("Clone shares storage or keeps zeros: %v %v", l, c)
	}
}

func TestSortLayouts(t *testing.T) {
	in := []string{
		"1g.10gb:7",
		"3g.40gb:1,1g.10gb:4",
		"7g.80gb:1",
		"3g.40gb:2",
		"3g.40gb:1,2g.20gb:2",
		"4g.40gb:1,3g.40gb:1",
		"3g.40gb:1",
		"",
	}
	want := []string{
		"7g.80gb:1",
		"4g.40gb:1,3g.40gb:1",
		"3g.40gb:2",
		"3g.40gb:1,2g.20gb:2",
		"3g.40gb:1,1g.10gb:4",
		"3g.40gb:1",
		"1g.10gb:7",
		"",
	}
	var ls []Layout
	for _, s := range in {
		l, err := ParseLayout(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	SortLayouts(ls)
	var got []string
	for _, l := range ls {
		got = append(got, l.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("SortLayouts order:\n got %q\nwant %q", got, want)
	}
	for i := range ls {
		if CompareLayouts(ls[i], ls[i]) != 0 {
			t.Errorf("CompareLayouts(%v, itself) != 0", ls[i])
		}
	}
}

func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{
		"", "3g.71gb:1,1g.18gb:3", "{1g.18gb: 7}", "7g.80gb", "1g.10gb+me:1",
		"a:1,b:2,c:0", "{'x': 3}", ":,:", "1g.10gb:1,1g.10gb:1", "{", "}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLayout(s)
		if err != nil {
			return
		}
		for n, c := range l {
			if c <= 0 || c > maxLayoutCount || !validName(n) {
				t.Fatalf("ParseLayout(%q) kept entry %q:%d", s, n, c)
			}
		}
		// The String form reads back to the same layout and is a fixed point.
		str := l.String()
		back, err := ParseLayout(str)
		if err != nil {
			t.Fatalf("ParseLayout(String()) of %q: %q: %v", s, str, err)
		}
		if !back.Equal(l) || back.String() != str {
			t.Fatalf("round trip of %q: %v -> %q -> %v", s, l, str, back)
		}
		// Every product either accepts it or names what it does not know.
		for _, p := range Products() {
			if _, err := p.Canonical(l); err != nil && !strings.Contains(err.Error(), "unknown MIG profile") {
				t.Fatalf("%s.Canonical(%v): %v", p.Name, l, err)
			}
			_ = p.Fits(l)
		}
	})
}

// TestAPIConversions guards the one conversion between the API's counts and Layout: zero
// counts vanish both ways, an empty layout is nil in the API (left out of the JSON), and the
// round trip keeps every non-zero count.
func TestAPIConversions(t *testing.T) {
	in := map[string]int32{"3g.71gb": 2, "1g.18gb": 0, "1g.18gb+me": 1}
	l := LayoutOf(in)
	if !l.Equal(Layout{"3g.71gb": 2, "1g.18gb+me": 1}) || len(l) != 2 {
		t.Errorf("LayoutOf(%v) = %v", in, l)
	}
	back := l.Counts()
	if len(back) != 2 || back["3g.71gb"] != 2 || back["1g.18gb+me"] != 1 {
		t.Errorf("Counts() = %v", back)
	}
	if Layout(nil).Counts() != nil || (Layout{}).Counts() != nil {
		t.Error("an empty layout is not nil in the API")
	}
	for name, want := range map[string]int{"3g.71gb": 3, "7g.141gb": 7, "1g.18gb+me": 1, "12g.200gb": 12, "gfx": 1, "": 1, "0g.1gb": 1} {
		if got := ComputeSlices(name); got != want {
			t.Errorf("ComputeSlices(%q) = %d, want %d", name, got, want)
		}
	}
}

package mig

import "testing"

func BenchmarkPlace(b *testing.B) {
	h200, _ := LookupProduct("H200-141GB")
	cases := []struct {
		name  string
		want  Layout
		fixed []Instance
	}{
		{"mixed", Layout{"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}, nil},
		{"seven-1g", Layout{"1g.18gb": 7}, nil},
		{"busy", Layout{"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}, []Instance{
			{"1g.18gb", Placement{Start: 2, Size: 1}},
			{"2g.35gb", Placement{Start: 0, Size: 2}},
		}},
		{"infeasible", Layout{"4g.71gb": 1, "1g.18gb": 1}, []Instance{{"1g.18gb", Placement{Start: 2, Size: 1}}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = h200.Place(c.want, c.fixed)
			}
		})
	}
}

func BenchmarkFits(b *testing.B) {
	h100, _ := LookupProduct("H100-80GB")
	for _, c := range []struct {
		name string
		want Layout
	}{
		{"fits", Layout{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
		{"no-fit", Layout{"3g.40gb": 2, "1g.10gb": 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h100.Fits(c.want)
			}
		})
	}
}

func BenchmarkAddable(b *testing.B) {
	h100, _ := LookupProduct("H100-80GB")
	in := []Instance{{"3g.40gb", Placement{Start: 4, Size: 4}}, {"1g.10gb", Placement{Start: 1, Size: 1}}}
	b.ReportAllocs()
	for b.Loop() {
		_ = h100.Addable(in, nil)
	}
}

func BenchmarkMaximalLayouts(b *testing.B) {
	b200, _ := LookupProduct("B200")
	b.ReportAllocs()
	for b.Loop() {
		_ = b200.MaximalLayouts()
	}
}

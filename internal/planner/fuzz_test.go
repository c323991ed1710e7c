package planner_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// fuzzConfig is propertyConfig on fewer nodes, so that each fuzz input plans quickly.
var fuzzConfig = func() genConfig {
	cfg := propertyConfig
	cfg.maxNodes = 4
	return cfg
}()

// FuzzPlan builds a small random pool from the fuzzer's bytes (each byte decides one random
// draw of genScenario; a PCG stream seeded by the input takes over when they run out), plans
// it, and checks that planning does not panic or fail, that every invariant of checkPlan holds
// and that planning is deterministic.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("gpupool"))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	for seed := range uint64(8) {
		r := newRand(seed, 3)
		data := make([]byte, 64+r.IntN(192))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := rand.New(newByteSource(data))
		s := genScenario(t, r, fmt.Sprintf("fuzz input %x", data), fuzzConfig)
		res, pc := planAndCheck(t, s, r)
		if len(pc.problems) > 0 {
			t.Fatalf("%s\nscenario:\n%splan:\n%s", strings.Join(pc.problems, "\n"), s.describe(), describeResult(res))
		}
	})
}

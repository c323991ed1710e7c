package controllers

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/internal/fixture"
)

// TestMemoryGoesBackOnceABurstEnds: the memory is returned once per burst of passes, when no
// pass has followed for the quiet time, and never while passes keep coming.
func TestMemoryGoesBackOnceABurstEnds(t *testing.T) {
	clock := clocktesting.NewFakeClock(fixture.Now)
	m := newMemoryReturner(clock, 10*time.Second)
	returned := 0
	m.do = func() { returned++ }

	for range 5 { // a burst: a pass every 3 s
		m.passed()
		clock.Step(3 * time.Second)
	}
	if returned != 0 {
		t.Fatalf("memory returned %d time(s) while passes kept coming", returned)
	}
	clock.Step(7 * time.Second) // 10 s after the last pass
	if returned != 1 {
		t.Fatalf("memory returned %d time(s) once the burst ended, want 1", returned)
	}
	clock.Step(time.Hour)
	if returned != 1 {
		t.Fatalf("memory returned %d time(s) at rest, want it once per burst", returned)
	}
	m.passed()
	clock.Step(10 * time.Second)
	if returned != 2 {
		t.Fatalf("a later pass: memory returned %d time(s) in all, want 2", returned)
	}
	if newMemoryReturner(clock, 0) != nil {
		t.Error("a zero quiet time must return nothing (nil)")
	}
	var none *memoryReturner
	none.passed() // a nil returner is a no-op
}

package intern

import (
	"fmt"
	"sync"
	"testing"
)

func TestEqualKeysShareTheFirstValue(t *testing.T) {
	table := NewTable[*int](8)
	first, second := new(int), new(int)
	if got := table.Share("a", first); got != first {
		t.Fatalf("the first value under a key is handed out as it is")
	}
	if got := table.Share("a", second); got != first {
		t.Fatalf("a second value under the same key gets the first one back")
	}
	if got := table.Share("b", second); got != second {
		t.Fatalf("another key keeps its own value")
	}
}

func TestATableStaysWithinItsSize(t *testing.T) {
	table := NewTable[int](4)
	for i := range 100 {
		table.Share(fmt.Sprint(i), i)
		if n := table.Len(); n > 4 {
			t.Fatalf("after %d distinct keys the table holds %d values, more than its size 4", i+1, n)
		}
	}
	// Starting afresh forgets older keys: their next value is handed out as it is.
	if got := table.Share("0", -1); got != -1 {
		t.Fatalf("a key forgotten when the table started afresh got %d, want the new value", got)
	}
}

func TestANilTableSharesNothing(t *testing.T) {
	var table *Table[string]
	if got := table.Share("k", "v"); got != "v" {
		t.Fatalf("a nil table returns the value given, got %q", got)
	}
	if table.Len() != 0 {
		t.Fatal("a nil table holds nothing")
	}
}

func TestConcurrentSharersAgree(t *testing.T) {
	table := NewTable[*int](16)
	got := make([]*int, 32)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = table.Share("same", new(int)) })
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("sharer %d got its own copy while the table held one", i)
		}
	}
}

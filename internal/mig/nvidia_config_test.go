package mig

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// nvidiaEntry is one spec of an all-* entry of NVIDIA's published mig-parted config.
type nvidiaEntry struct {
	name    string
	filter  []uint16 // nil: the spec applies to every GPU
	devices Layout
}

func readNVIDIAEntries(t *testing.T) []nvidiaEntry {
	t.Helper()
	f, err := os.Open("testdata/nvidia-config-default-entries.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []nvidiaEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("malformed line %q", line)
		}
		e := nvidiaEntry{name: cols[0], devices: Layout{}}
		if cols[1] != "*" {
			for id := range strings.SplitSeq(cols[1], ",") {
				v, err := strconv.ParseUint(strings.TrimPrefix(id, "0x"), 16, 16)
				if err != nil {
					t.Fatalf("%s: device ID %q: %v", e.name, id, err)
				}
				e.filter = append(e.filter, uint16(v))
			}
		}
		for kv := range strings.SplitSeq(cols[2], ",") {
			name, n, _ := strings.Cut(kv, ":")
			c, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: count %q: %v", e.name, kv, err)
			}
			e.devices[name] = c
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// orphanEntries are entries of NVIDIA's config that no GPU can take: no MIG
// profile of that name exists on any part NVIDIA's MIG user guide or config
// lists. mig-parted would refuse them on every GPU; each is kept here with why,
// and the test fails when one becomes placeable, so the list cannot go stale.
var orphanEntries = map[string]string{
	// Left behind when commit 4a493585 ("mig-profile cleanup") renamed an
	// unused GB200 entry; the GB200's +me profile is 1g.23gb+me and no other
	// GPU has a 1g.24gb+me.
	"all-1g.24gb.me": "1g.24gb+me exists on no GPU",
}

// TestNVIDIAConfigEntriesFit holds the built-in table to NVIDIA's own default
// config: every all-* spec is a layout gpupool's geometry accepts on each GPU
// its device filter names, and an unfiltered spec on every product that has
// all its profiles (mig-parted applies it to every GPU and fails on those that
// lack them). A name counts when the product resolves it, aliases included.
func TestNVIDIAConfigEntriesFit(t *testing.T) {
	entries := readNVIDIAEntries(t)
	if len(entries) < 90 {
		t.Fatalf("read %d specs; the transcription is truncated", len(entries))
	}
	filtered := map[uint16]bool{}
	for _, e := range entries {
		var targets []*Product
		if e.filter != nil {
			for _, id := range e.filter {
				filtered[id] = true
				p, ok := LookupProductByPCIID(uint32(id))
				if !ok {
					t.Errorf("%s: device-filter 0x%04X names a GPU the built-in table lacks", e.name, id)
					continue
				}
				targets = append(targets, p)
			}
		} else {
			for _, p := range Products() {
				if p.countsErr(e.devices) == nil {
					targets = append(targets, p)
				}
			}
		}
		if why, orphan := orphanEntries[e.name]; orphan {
			if len(targets) > 0 {
				t.Errorf("%s is listed as an orphan (%s) but %s takes it", e.name, why, targets[0].Name)
			}
			continue
		}
		if len(targets) == 0 {
			t.Errorf("%s (%s): no built-in product has these profiles", e.name, e.devices)
		}
		for _, p := range targets {
			if !p.Fits(e.devices) {
				_, err := p.Place(e.devices, nil)
				t.Errorf("%s: %s refuses %s: %v", e.name, p.Name, e.devices, err)
			}
		}
	}
	// Every PCI device ID NVIDIA's config filters on is one of ours, and the
	// other way round: a built-in ID the config never names is a guess.
	for _, p := range Products() {
		for _, id := range p.PCIDeviceIDs {
			if !filtered[id] {
				t.Errorf("%s: PCI device ID 0x%04X appears in no device-filter of NVIDIA's config", p.Name, id)
			}
		}
	}
}

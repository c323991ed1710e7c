package measure

import (
	"testing"
	"time"
)

func TestParseCPUTime(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		err  bool
	}{
		// utime 250 and stime 50 ticks: 3 s. The command name may hold spaces and ')'.
		{line: "4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0", want: 3 * time.Second},
		{line: "7 (odd ) name) R 1 7 7 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 0 0", want: 20 * time.Millisecond},
		{line: "garbage", err: true},
		{line: "1 (x) S 1 2 3", err: true},
	} {
		got, err := parseCPUTime(tc.line)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseCPUTime(%q) = %v, %v; want %v, error %v", tc.line, got, err, tc.want, tc.err)
		}
	}
}

func TestParseMemory(t *testing.T) {
	status := "Name:\tmanager\nVmPeak:\t 2000000 kB\nVmHWM:\t  618000 kB\nVmRSS:\t  526000 kB\nThreads:\t12\n"
	rss, peak, err := parseMemory(status)
	if err != nil || rss != 526000*1024 || peak != 618000*1024 {
		t.Errorf("parseMemory = %d, %d, %v; want %d, %d", rss, peak, err, 526000*1024, 618000*1024)
	}
	if _, _, err := parseMemory("Name:\tzombie\nState:\tZ (zombie)\n"); err == nil {
		t.Error("a status without VmRSS must be an error")
	}
	if _, _, err := parseMemory("VmRSS:\tlots kB\nVmHWM:\t1 kB\n"); err == nil {
		t.Error("a malformed VmRSS must be an error")
	}
}

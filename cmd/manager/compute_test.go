package main

import (
	"strings"
	"testing"
)

func TestComputeSource(t *testing.T) {
	src, err := computeSource("")
	if err != nil || src != nil {
		t.Fatalf(`computeSource("") = %v, %v; want a nil source: compute not measured`, src, err)
	}
	if _, err := computeSource("prometheus:9090"); err == nil || !strings.Contains(err.Error(), "--prometheus-url") {
		t.Fatalf("a URL without a scheme: %v, want an error naming --prometheus-url", err)
	}
	if src, err := computeSource("http://prometheus-operated.monitoring.svc:9090"); err != nil || src == nil {
		t.Fatalf("computeSource(valid) = %v, %v", src, err)
	}
}

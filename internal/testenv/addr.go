package testenv

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address nothing listens on, so that servers under test and
// parallel test runs do not clash over fixed ports.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

package heartbeat

import (
	"io"
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// traffic counts what a client sent and received.
type traffic struct {
	requests, sent, received atomic.Int64
}

func (t *traffic) reset() {
	t.requests.Store(0)
	t.sent.Store(0)
	t.received.Store(0)
}

// counted returns a copy of cfg whose requests and responses t counts, watch streams included
// (a response is counted as it is read).
func (t *traffic) counted(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, t: t} })
	return out
}

type countingTransport struct {
	next http.RoundTripper
	t    *traffic
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.t.requests.Add(1)
	if req.ContentLength > 0 {
		c.t.sent.Add(req.ContentLength)
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.t.received}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

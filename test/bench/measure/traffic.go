package measure

import (
	"io"
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// Traffic counts what a client sent and received.
type Traffic struct {
	Requests, Sent, Received atomic.Int64
}

// Reset starts the counts again.
func (t *Traffic) Reset() {
	t.Requests.Store(0)
	t.Sent.Store(0)
	t.Received.Store(0)
}

// Counted returns a copy of cfg whose requests and responses t counts, watch streams included
// (a response is counted as it is read).
func (t *Traffic) Counted(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return t.Wrap(rt) })
	return out
}

// Wrap returns a transport that counts into t what rt sends and receives.
func (t *Traffic) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{next: rt, t: t}
}

type countingTransport struct {
	next http.RoundTripper
	t    *Traffic
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.t.Requests.Add(1)
	if req.ContentLength > 0 {
		c.t.Sent.Add(req.ContentLength)
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.t.Received}
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

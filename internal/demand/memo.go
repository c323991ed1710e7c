package demand

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// RequestCache remembers PodRequests per pod object across planning passes. An informer never
// modifies an object it has handed out, it replaces it, so the pointer to a cached pod names
// its requests exactly: an updated pod is a new pointer and is computed afresh. A pass reads
// every pod of every GPU node twice (inventory and pending demand), and computing requests
// was most of what a pass allocated (about 4 KB a pod, 600 MB a pass at 55,000 pods).
//
// Entries age out by generation: Rotate, once per pass, forgets what the pass before last
// read and the last one did not, so deleted and replaced pods cost at most two passes of
// memory. The lists it returns are shared: read them, never write into them.
type RequestCache struct {
	mu        sync.Mutex
	cur, prev map[*corev1.Pod]corev1.ResourceList
}

// NewRequestCache is an empty cache.
func NewRequestCache() *RequestCache {
	return &RequestCache{cur: map[*corev1.Pod]corev1.ResourceList{}}
}

// Requests is PodRequests(pod), remembered. A nil cache computes it every time, for callers
// whose pods are not an informer's (a saved snapshot, a test).
func (c *RequestCache) Requests(pod *corev1.Pod) corev1.ResourceList {
	if c == nil {
		return PodRequests(pod)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.cur[pod]; ok {
		return r
	}
	r, ok := c.prev[pod]
	if !ok {
		r = PodRequests(pod)
	}
	c.cur[pod] = r
	return r
}

// Rotate starts a new generation: pods not read since the previous Rotate are forgotten.
func (c *RequestCache) Rotate() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[*corev1.Pod]corev1.ResourceList, len(c.cur))
}

// Len is how many pods the cache remembers.
func (c *RequestCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}

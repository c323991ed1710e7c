package demand

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/fixture"
)

// BenchmarkPending runs over a cluster-sized pod list where most pods ask for no GPU, the
// shape the controller feeds it on every reconcile.
func BenchmarkPending(b *testing.B) {
	pods := make([]corev1.Pod, 10000)
	for i := range pods {
		if i%10 == 0 {
			pods[i] = pendingPod(fmt.Sprintf("gpu-%05d", i), withInit(sidecar("proxy", fixture.Resources("cpu", "100m"))))
		} else {
			pods[i] = pendingPod(fmt.Sprintf("web-%05d", i), withMain(fixture.Resources("cpu", "500m", "memory", "1Gi"), fixture.Resources("memory", "1Gi")))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		reqs, _ := Pending(pointers(pods), now, minAge)
		if len(reqs) != 1000 {
			b.Fatalf("got %d requests", len(reqs))
		}
	}
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestManagerElectsLeaderAndServesProbes runs the manager against a real API server: it must
// take the leader Lease, answer its probes and metrics, and release the Lease on shutdown so a
// standby replica takes over at once.
func TestManagerElectsLeaderAndServesProbes(t *testing.T) {
	g := NewWithT(t)
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	opts := options{
		metricsAddr:             testenv.FreeAddr(t),
		probeAddr:               testenv.FreeAddr(t),
		metricsSecure:           true,
		leaderElect:             true,
		leaderElectionNamespace: "default",
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, env.Config, opts) }()

	get := func(url string) (int, error) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, probe := range []string{"healthz", "readyz"} {
		g.Eventually(func() (int, error) {
			return get(fmt.Sprintf("http://%s/%s", opts.probeAddr, probe))
		}).WithTimeout(30*time.Second).Should(Equal(http.StatusOK), probe)
	}

	lease := &coordinationv1.Lease{}
	key := types.NamespacedName{Namespace: "default", Name: "gpupool-manager.gpupool.io"}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, key, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		g.Expect(*lease.Spec.HolderIdentity).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Metrics are served over HTTPS by default; an anonymous request must be refused, not served.
	// The certificate is self-signed; what matters here is that anonymous callers are refused.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed local endpoint
	}}
	g.Eventually(func() (int, error) {
		resp, err := client.Get(fmt.Sprintf("https://%s/metrics", opts.metricsAddr))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}).WithTimeout(30 * time.Second).Should(BeElementOf(http.StatusUnauthorized, http.StatusForbidden))

	cancel()
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(context.Background(), key, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).To(Or(BeNil(), HaveValue(BeEmpty())), "lease released on shutdown")
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// TestHeapLimit guards the manager's soft memory limit: 90% of the container's, the operator's
// GOMEMLIMIT winning, none without a limit, and a clear error for a value that is not bytes.
func TestHeapLimit(t *testing.T) {
	for _, tc := range []struct {
		gomemlimit, container string
		want                  int64
		set, err              bool
	}{
		{container: "536870912", want: 483183819, set: true},
		{gomemlimit: "400MiB", container: "536870912"},
		{},
		{container: "512Mi", err: true},
		{container: "0", err: true},
	} {
		got, set, err := heapLimit(tc.gomemlimit, tc.container)
		if got != tc.want || set != tc.set || (err != nil) != tc.err {
			t.Errorf("heapLimit(%q, %q) = %d, %v, %v; want %d, %v, error %v", tc.gomemlimit, tc.container, got, set, err, tc.want, tc.set, tc.err)
		}
	}
}

func TestAgentPodSelector(t *testing.T) {
	for _, tc := range []struct {
		namespace, selector, daemonSet, serviceAccount string
		want                                           string // the parsed selector, or the error's gist
	}{
		{"gpupool-agent", "", "gpupool-agent", "gpupool-agent", ""},
		{"gpupool-agent", "", "", "", ""}, // no readiness read: the names are not needed
		{"gpupool-agent", "app.kubernetes.io/name=gpupool-agent,app.kubernetes.io/instance=gpupool", "gpupool-agent", "gpupool-agent",
			"app.kubernetes.io/instance=gpupool,app.kubernetes.io/name=gpupool-agent"},
		{"gpupool-agent", "app in (a", "gpupool-agent", "gpupool-agent", "give the agent DaemonSet's selector"},
		{"", "app=agent", "gpupool-agent", "gpupool-agent", "needs --agent-namespace"},
		// Labels anyone can copy: the pods' controller and identity must be known too.
		{"gpupool-agent", "app=agent", "", "gpupool-agent", "--agent-pod-selector needs --agent-daemonset: give the agent DaemonSet's name"},
		{"gpupool-agent", "app=agent", "gpupool-agent", "", "--agent-pod-selector needs --agent-service-account"},
		{"gpupool-agent", "app=agent", "Agent_DS", "gpupool-agent", `--agent-daemonset="Agent_DS": a lowercase RFC 1123 subdomain`},
		{"gpupool-agent", "app=agent", "gpupool-agent", "a/b", `--agent-service-account="a/b": a lowercase RFC 1123 subdomain`},
	} {
		got, err := agentPodSelector(tc.namespace, tc.selector, tc.daemonSet, tc.serviceAccount)
		switch {
		case err != nil:
			if tc.want == "" || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q in %q (%q, %q): error %v, want %q", tc.selector, tc.namespace, tc.daemonSet, tc.serviceAccount, err, tc.want)
			}
		case tc.want == "":
			if got != nil {
				t.Errorf("%q: got %v, want no selector", tc.selector, got)
			}
		case got == nil || got.String() != tc.want:
			t.Errorf("%q (%q, %q): got %v, want %s", tc.selector, tc.daemonSet, tc.serviceAccount, got, tc.want)
		}
	}
}

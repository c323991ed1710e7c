package e2e_test

import (
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/simcluster"
)

// rightsizeRow is the part of one row of kubectl gpupool rightsize -o json the scenario reads.
type rightsizeRow struct {
	Kind, Name, Requested, Recommended, Message, Fix, Compute string
	Verdict                                                   rightsize.Verdict
	Reason                                                    rightsize.Reason
	FreedSlices                                               int
	P95MiB, PeakMiB                                           int64
}

func (r rightsizeRow) String() string {
	return fmt.Sprintf("%s %s: %s %s -> %q (p95 %d, peak %d MiB): %s", r.Kind, r.Name, r.Verdict, r.Reason, r.Recommended, r.P95MiB, r.PeakMiB, r.Message)
}

// rightsizeRows runs kubectl gpupool rightsize -n NS -o json with the simulated agents' evidence
// thresholds (simcluster.UsageMinWindow and UsageMinSamples), and returns the rows by name.
func (s *scenario) rightsizeRows(g Gomega) map[string]rightsizeRow {
	out := kubectlGpupool(g, "rightsize", "-n", s.ns, "-o", "json",
		"--min-window="+simcluster.UsageMinWindow.String(), fmt.Sprintf("--min-samples=%d", simcluster.UsageMinSamples))
	var doc struct{ Workloads []rightsizeRow }
	g.Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed(), out)
	rows := map[string]rightsizeRow{}
	for _, r := range doc.Workloads {
		rows[r.Name] = r
	}
	return rows
}

// whatIfApplied and whatIfPool are the parts of what-if --rightsized -o json the scenario reads.
type whatIfApplied struct {
	Workload string
	Pods     int
	From, To string
}

type whatIfPool struct {
	Policy              string
	Pods, FreedGPUs     int
	AsAsked, Rightsized struct{ GPUs, Nodes int }
	Applied             []whatIfApplied
}

// whatIfRightsized runs kubectl gpupool what-if --live --rightsized -o json with the simulated
// agents' evidence thresholds and returns the scenario's pool.
func (s *scenario) whatIfRightsized() whatIfPool {
	out := kubectlGpupool(Default, "what-if", "--live", "--rightsized", "-o", "json",
		"--min-window="+simcluster.UsageMinWindow.String(), fmt.Sprintf("--min-samples=%d", simcluster.UsageMinSamples))
	var doc struct {
		Rightsized struct {
			Note  string
			Pools []whatIfPool
		}
	}
	Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed(), out)
	Expect(doc.Rightsized.Note).To(BeEmpty())
	for _, p := range doc.Rightsized.Pools {
		if p.Policy == s.policy {
			return p
		}
	}
	Fail(fmt.Sprintf("what-if --rightsized has no pool %s: %s", s.policy, out))
	return whatIfPool{}
}

var _ = Describe("right-sizing on a simulated GPU cluster", func() {
	// Guards the recommender end to end, from a pod's declared use through the simulated NVML,
	// the node agent's histogram and GPUNode status.usage, to kubectl gpupool rightsize: three
	// Deployments on 3g.71gb, carved for them on two all-1g nodes. The one using 9 GiB steadily is
	// recommended 1g.18gb (9 GiB and 20% headroom fit its 18 GB) once the window has passed, and
	// not before; the bursty one whose 40 GiB peaks need the 3g.71gb keeps it; the preallocating
	// one gets "cannot tell" with the environment variables that turn preallocation off.
	// Without --prometheus-url, every recommendation says compute was not measured. what-if
	// --rightsized then frees the GPU the steady one's three replicas waste.
	It("recommends 1g.18gb for a 3g.71gb Deployment using 9 GiB once the window has passed, keeps a bursty one, cannot tell a preallocating one, and what-if --rightsized frees a GPU", func() {
		s := newScenario("rightsize")
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		usage := func(pattern string) map[string]string { return map[string]string{sim.AnnotationUsage: pattern} }
		s.deploy("steady", 3, s.inPool(), mig3g, 1, usage("steady:9Gi"))
		s.deploy("bursty", 1, s.inPool(), mig3g, 1, usage("bursty:4Gi-40Gi/20s"))
		s.deploy("prealloc", 1, s.inPool(), mig3g, 1, usage("preallocate:0.9"))
		s.unpauseWhenPending(5)
		s.waitPlan(3*time.Minute, v1alpha1.PlanSucceeded)
		s.waitRunning("steady", 3, time.Minute)
		for _, app := range []string{"bursty", "prealloc"} {
			s.waitRunning(app, 1, time.Minute)
		}
		running := time.Now()

		By("before the window has passed: too little data, and the time it takes")
		Eventually(func(g Gomega) {
			r := s.rightsizeRows(g)["steady"]
			g.Expect(r.Reason).To(Equal(rightsize.ReasonTooLittleData), "%s", r)
			g.Expect(r.Verdict).To(Equal(rightsize.CannotTell))
			g.Expect(r.Fix).To(ContainSubstring("wait until a pod has run for " + simcluster.UsageMinWindow.String()))
		}).WithTimeout(simcluster.UsageMinWindow/2).WithPolling(time.Second).Should(Succeed(), s.diagnostics)

		By("once the window has passed: shrink the steady one, keep the bursty one, cannot tell the preallocating one")
		var rows map[string]rightsizeRow
		Eventually(func(g Gomega) {
			rows = s.rightsizeRows(g)
			steady, bursty, prealloc := rows["steady"], rows["bursty"], rows["prealloc"]
			g.Expect(steady).To(SatisfyAll(HaveField("Kind", "Deployment"), HaveField("Requested", "3g.71gb"),
				HaveField("Verdict", rightsize.Shrink), HaveField("Reason", rightsize.ReasonSmallerFits),
				HaveField("Recommended", "1g.18gb"), HaveField("FreedSlices", 3*3),
				HaveField("Message", ContainSubstring("20% headroom"))), "%s", steady)
			g.Expect(bursty).To(SatisfyAll(HaveField("Verdict", rightsize.Keep), HaveField("Reason", rightsize.ReasonRequestFits),
				HaveField("Recommended", "3g.71gb"), HaveField("PeakMiB", BeNumerically(">=", 40*1024)), HaveField("FreedSlices", 0)), "%s", bursty)
			g.Expect(prealloc).To(SatisfyAll(HaveField("Verdict", rightsize.CannotTell), HaveField("Reason", rightsize.ReasonPreallocating),
				HaveField("Recommended", ""), HaveField("Fix", ContainSubstring("XLA_PYTHON_CLIENT_PREALLOCATE=false"))), "%s", prealloc)
		}).WithTimeout(2*time.Minute).WithPolling(2*time.Second).Should(Succeed(), s.diagnostics)
		for _, app := range []string{"steady", "bursty"} {
			Expect(rows[app].Compute).To(ContainSubstring("compute not measured"), "%s", rows[app])
		}

		By("what-if --rightsized: the GPU the steady Deployment's three 3g.71gb waste is freed")
		// Packed as they ask, five 3g.71gb take three GPUs (two to a GPU); right-sized, the
		// bursty and preallocating 3g.71gb fill one GPU and the three 1g.18gb a second.
		pool := s.whatIfRightsized()
		Expect(pool).To(SatisfyAll(HaveField("Pods", 5), HaveField("AsAsked.GPUs", 3), HaveField("Rightsized.GPUs", 2),
			HaveField("FreedGPUs", 1)), "%+v", pool)
		Expect(pool.Applied).To(ConsistOf(whatIfApplied{Workload: "Deployment " + s.ns + "/steady", Pods: 3, From: "3g.71gb", To: "1g.18gb"}))
		AddReportEntry("rightsize: pods Running to a recommendation", time.Since(running).Round(time.Second).String())
	})
})

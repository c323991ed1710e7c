package v1alpha1_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/pool"
)

func window(schedule string, d time.Duration) v1.MaintenanceWindow {
	return v1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}}
}

var _ = Describe("GPUPoolPolicy maintenance windows", func() {
	It("accepts windows at the controller's duration bounds, so that the CRD and pool.ParseWindow agree", func(ctx SpecContext) {
		p := validPolicy("windows")
		p.Spec.Disruption.Windows = []v1.MaintenanceWindow{
			window("0 2 * * 6", pool.MinWindowDuration),
			window("@daily", pool.MaxWindowDuration),
			{Schedule: "30 1 * * MON-FRI", Duration: metav1.Duration{Duration: 4 * time.Hour}, TimeZone: "America/New_York"},
		}
		for _, w := range p.Spec.Disruption.Windows {
			_, err := pool.ParseWindow(w)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })
	})

	DescribeTable("rejects a window the API server can tell is wrong, naming the field",
		func(mutate func(*v1.GPUPoolPolicy), field, message string) {
			p := validPolicy("bad-window")
			mutate(p)
			expectInvalid(p, field, message)
		},
		Entry("shorter than the controller's bound", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("0 2 * * *", pool.MinWindowDuration-time.Second)}
		}, "spec.disruption.windows[0].duration", "must be a duration between 1m and 168h"),
		Entry("longer than the controller's bound", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("0 2 * * *", pool.MaxWindowDuration+time.Minute)}
		}, "spec.disruption.windows[0].duration", "must be a duration between 1m and 168h"),
		Entry("no duration", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("0 2 * * *", 0)}
		}, "spec.disruption.windows[0].duration", "must be a duration between 1m and 168h"),
		Entry("six cron fields", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("0 0 2 * * *", time.Hour)}
		}, "spec.disruption.windows[0].schedule", "should match"),
		Entry("a time zone in the schedule", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("CRON_TZ=Europe/Berlin 0 2 * * *", time.Hour)}
		}, "spec.disruption.windows[0].schedule", "set the time zone in timeZone"),
		Entry("@every", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("@every 1h", time.Hour)}
		}, "spec.disruption.windows[0].schedule", "should match"),
		Entry("an empty schedule", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("", time.Hour)}
		}, "spec.disruption.windows[0].schedule", "should be at least 1 chars long"),
		Entry("a time zone that is no zone name", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Windows = []v1.MaintenanceWindow{{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "../etc/passwd"}}
		}, "spec.disruption.windows[0].timeZone", "should match"),
		Entry("more windows than the list holds", func(p *v1.GPUPoolPolicy) {
			for i := range 21 {
				p.Spec.Disruption.Windows = append(p.Spec.Disruption.Windows, window(fmt.Sprintf("%d 2 * * *", i), time.Hour))
			}
		}, "spec.disruption.windows", "must have at most 20 items"),
	)

	It("stores a schedule only the controller can refuse, which pool.Problems reports", func(ctx context.Context) {
		p := validPolicy("never-window")
		p.Spec.Disruption.Windows = []v1.MaintenanceWindow{window("0 0 30 2 *", time.Hour)}
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })
		problems := pool.Problems(&p.Spec)
		Expect(problems).NotTo(BeEmpty())
		Expect(problems[0].Blocking).To(BeTrue())
		Expect(problems[0].String()).To(ContainSubstring("spec.disruption.windows[0]: schedule \"0 0 30 2 *\" never fires"))
	})
})

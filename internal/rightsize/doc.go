// Package rightsize measures how much GPU memory pods really use and recommends the MIG profile
// a workload needs, without ever changing the workload (recommend only, as the Vertical Pod
// Autoscaler's "Off" mode does).
//
// It has three parts, all pure (no client, no clock: the time is an argument):
//
//   - Histogram: a bounded, decaying histogram of one pod's memory use, which the node agent
//     feeds at its refresh interval. Buckets grow exponentially and old samples lose weight
//     with a half-life, as VPA's histograms do (kubernetes/autoscaler,
//     vertical-pod-autoscaler/pkg/recommender/util/histogram.go and decaying_histogram.go), so
//     one pod costs a fixed ~1.4 KiB however long it runs, and adding a sample is O(1).
//   - Summary and PublishRule: the few integers the agent publishes per pod in its GPUNode
//     status, and the rule that says when a new summary differs enough from the published one
//     to be worth a write.
//   - Recommend: the smallest profile of the pool's catalog (a mig.Product) whose memory covers
//     the workload's p95 (or peak) plus headroom, or "cannot tell" with the reason and the fix
//     when the measurements cannot be trusted: too little data, memory preallocated by the
//     framework (usage flat near the instance's ceiling), or pods of one workload that disagree.
package rightsize

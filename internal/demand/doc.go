// Package demand turns pods into the GPU demand the planner serves: which pods
// the scheduler has given up on, what GPU resources they ask for, everything
// else they need from a node, and which nodes their placement rules allow.
//
// It is a pure snapshot, like internal/inventory: it takes objects the caller
// already holds (from informers or from a snapshot file read by the offline
// CLI), never calls the API server, never reads the clock and never logs.
// The same input gives the same output, in the same order, so two planners
// fed the same snapshot propose the same plan.
//
// Resource accounting follows the scheduler, through k8s.io/component-helpers
// (the library kube-scheduler itself uses), not a re-implementation: init
// containers count by the max rule, sidecars (restartable init containers)
// add up, pod overhead and pod-level resources apply. See PodRequests for the
// two places where this package deliberately adds to that.
package demand

// Package nvidia speaks the protocols of NVIDIA's unchanged GPU Operator, as pure functions:
// the mig-parted config file that mig-manager reads, the node labels through which mig-manager
// is asked to apply an entry and reports how it went, and the ClusterPolicy settings gpupool
// relies on. Nothing here talks to the API server; the plan controller reads and writes the
// objects and asks this package what they mean.
package nvidia

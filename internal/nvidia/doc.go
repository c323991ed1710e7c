// Package nvidia speaks the protocols of NVIDIA's unchanged GPU Operator, as pure functions:
// the mig-parted config file that mig-manager reads and the names of gpupool's entries in it,
// the node labels through which mig-manager is asked to apply an entry and reports how it went,
// the device plugin's config file, the names of gpupool's keys in it and the resources it
// advertises, and the ClusterPolicy settings gpupool relies on. Nothing here talks to the API
// server; the plan controller reads and writes the objects and asks this package what they mean.
//
// It depends on internal/mig (and the API types) only, so that the planner, the rollout and
// the controllers can all ask it without one of them becoming the home of NVIDIA's spelling;
// a depguard rule in .golangci.yml keeps it so.
package nvidia

// Package mig models MIG geometry exactly enough to decide, without touching a
// GPU, whether a multiset of MIG profiles can coexist on one GPU, and where.
//
// The driver does not create instances anywhere: every GPU-instance profile has
// a short list of allowed placements (a start memory slice and a size), and a
// multiset of profiles fits only if one instance of each can be put at one of
// its placements without two sharing a memory slice, the compute slices add up
// to no more than the GPU has, per-profile instance limits hold, and the media
// engines are not over-committed (at most one +me instance; a +me.all instance
// only beside -me ones). Counting slices alone (what most
// schedulers do) accepts layouts the driver refuses, so the planner relies on
// this package for every target layout it proposes.
//
// Everything here is pure and deterministic: the same input gives the same
// placement, order and error text. The hot paths (Fits, Place) work on fixed
// size arrays and bitmasks of memory slices so a planner can call them
// millions of times.
//
// The built-in table (Products) covers every GPU in NVIDIA's published
// mig-parted config (deployments/systemd/config-default.yaml): Ampere, Hopper,
// Grace Hopper, Blackwell, Blackwell Ultra and RTX PRO 6000 Blackwell; each
// product says where its placements come from (Product.Source). Where the agent reads the real table from NVML on a node,
// NewProductFromProfiles builds a Product from it and that one wins.
package mig

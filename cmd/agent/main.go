// Command agent is gpupool's node agent, its read-only eyes on a GPU node.
//
// This build implements --probe only: read the node's GPUs through NVML, print
// them as JSON with each GPU's profile table compared against gpupool's
// built-in MIG tables (internal/mig), and exit. On a machine with a real GPU
// that one command confirms or refutes the placements the planner assumes.
//
// go-nvml loads libnvidia-ml.so.1 with dlopen when NVML is initialised, so the
// binary builds and starts without a driver and reports the missing driver
// clearly. go-nvml needs cgo: build with CGO_ENABLED=1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
)

// Exit codes.
const (
	exitOK    = 0
	exitNVML  = 1 // NVML unusable: no driver, no GPU, ...
	exitUsage = 2
)

// podResourcesTimeout bounds the probe's one call to the kubelet.
const podResourcesTimeout = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, func() agent.NVML { return nvml.New() }))
}

// run is main with its dependencies passed in, so tests can drive it with
// go-nvml's mock servers.
func run(args []string, stdout, stderr io.Writer, newNVML func() agent.NVML) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	probe := fs.Bool("probe", false, "read the GPUs through NVML, print them as JSON with a comparison against gpupool's built-in MIG tables, and exit")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	socket := fs.String("pod-resources-socket", agent.DefaultPodResourcesSocket, "kubelet PodResources API socket, a path or unix:// URL")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if !*probe {
		fmt.Fprintln(stderr, "agent: only --probe is supported in this build (it does not publish GPUNode objects); run: agent --probe")
		return exitUsage
	}

	gpus, err := agent.Read(newNVML())
	if err != nil {
		fmt.Fprintf(stderr, "agent --probe: %v\n", err)
		var e *agent.Error
		if errors.As(err, &e) {
			fmt.Fprintf(stderr, "agent --probe: NVMLReady=False reason=%s\n", e.Reason)
		}
		return exitNVML
	}
	note, unmatched := attributePods(gpus, *socket)
	report := agent.NewProbeReport(*nodeName, gpus)
	report.PodResources, report.UnmatchedDevices = note, unmatched

	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		fmt.Fprintf(stderr, "agent --probe: write JSON: %v\n", err)
		return exitNVML
	}
	return exitOK
}

// attributePods adds pods from the kubelet when its socket exists; the probe
// is about hardware, so a node without a kubelet only gets a note.
func attributePods(gpus []v1alpha1.GPUStatus, socket string) (note string, unmatched []string) {
	path := strings.TrimPrefix(strings.TrimPrefix(socket, "unix://"), "unix:")
	if _, err := os.Stat(path); err != nil {
		return fmt.Sprintf("skipped: no kubelet PodResources socket at %s", path), nil
	}
	c, err := agent.NewPodResourcesClient(socket)
	if err != nil {
		return "failed: " + err.Error(), nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), podResourcesTimeout)
	defer cancel()
	owners, err := agent.DeviceOwners(ctx, c)
	if err != nil {
		return "failed: " + err.Error(), nil
	}
	return fmt.Sprintf("read from %s", path), agent.Attribute(gpus, owners)
}

// Command gpupoolctl is gpupool's command-line tool. Installed as kubectl-gpupool it is also a
// kubectl plugin ("kubectl gpupool plan ..."); the subcommands are the same either way.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Exit codes, shared by every subcommand.
const (
	exitOK = 0
	// exitFailed is a failure that is not the input's fault, e.g. stdout closed.
	exitFailed = 1
	// exitInvalid is unreadable or invalid input, or a usage mistake.
	exitInvalid = 2
)

func main() {
	os.Exit(run(programName(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// programName is how messages refer to the tool: kubectl runs plugins as kubectl-<name>, and
// users typed "kubectl gpupool", not the binary's name.
func programName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if base == "kubectl-gpupool" {
		return "kubectl gpupool"
	}
	return "gpupoolctl"
}

// run dispatches to a subcommand and returns the exit code.
func run(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(name, stderr)
		return exitInvalid
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return run(name, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		usage(name, stdout)
		return exitOK
	case "status":
		return runStatus(name, args[1:], stdout, stderr)
	case "why":
		return runWhy(name, args[1:], stdout, stderr)
	case "plan":
		// "plan -f FILE" was the offline what-if before the live commands; it stays one.
		if slices.ContainsFunc(args[1:], func(a string) bool {
			return a == "-f" || a == "--f" || a == "-filename" || a == "--filename" || strings.HasPrefix(a, "-f=") ||
				strings.HasPrefix(a, "--f=") || strings.HasPrefix(a, "-filename=") || strings.HasPrefix(a, "--filename=")
		}) {
			return runWhatIf(name, args[1:], stdin, stdout, stderr)
		}
		return runPlanLive(name, args[1:], stdout, stderr)
	case "approve", "reject":
		return runDecide(name, args[0], args[1:], stdout, stderr)
	case "what-if":
		return runWhatIf(name, args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "%s: unknown command %q: run %s --help for the commands\n", name, args[0], name)
	return exitInvalid
}

func usage(name string, w io.Writer) {
	fmt.Fprintf(w, `%[1]s inspects and plans gpupool's MIG repartitioning.

Usage:
  %[1]s COMMAND [ARGS] [-o table|json|yaml] [--kubeconfig FILE] [--context NAME]

Commands on the live cluster (the kubeconfig's current context, or --context):
  status [POLICY]          each pool's nodes and layouts, demand per shape, stranded slices, the plan's progress
  why POD [-n NS]          why a GPU pod is pending (or what a running one holds): the layer, the blocking
                           dimension, the node matrix, and what the current or next plan does about it
  plan [PLAN]              list the RepartitionPlans, or show one node by node
  approve PLAN             approve a plan, bound to its hash (read from the plan itself)
  reject PLAN --reason R   reject a plan
  what-if --live           the plans gpupool would propose now, computed here; nothing is written

Offline:
  what-if -f SNAPSHOT      the same for a saved snapshot (kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml)

Run "%[1]s COMMAND --help" for a command's flags.
Exit status: 0 on success, 2 on unreadable or invalid input or a usage mistake, 1 otherwise.
`, name)
}

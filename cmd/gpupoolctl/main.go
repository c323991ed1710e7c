// Command gpupoolctl is gpupool's command-line tool. Installed as kubectl-gpupool it is also a
// kubectl plugin ("kubectl gpupool plan ..."); the subcommands are the same either way.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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
		if len(args) > 1 && args[0] == "help" && args[1] == "plan" {
			return runPlan(name, []string{"--help"}, stdin, stdout, stderr)
		}
		usage(name, stdout)
		return exitOK
	case "plan":
		return runPlan(name, args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "%s: unknown command %q: run %s --help for the commands\n", name, args[0], name)
	return exitInvalid
}

func usage(name string, w io.Writer) {
	fmt.Fprintf(w, `%[1]s inspects and plans gpupool's MIG repartitioning.

Usage:
  %[1]s plan -f FILE [-o table|json|yaml] [--now RFC3339] [--policy NAME]

Commands:
  plan    what-if: the RepartitionPlans gpupool would propose for a saved cluster snapshot

Run "%[1]s plan --help" for the plan command's flags and input format.
Exit status: 0 on success, 2 on unreadable or invalid input or a usage mistake, 1 otherwise.
`, name)
}

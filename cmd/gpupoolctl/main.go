// Command gpupoolctl is gpupool's command-line tool. Installed as kubectl-gpupool it is also a
// kubectl plugin ("kubectl gpupool plan ..."); the subcommands are the same either way.
//
// It is built as kubectl's own commands are: cobra for the command tree and completion,
// k8s.io/cli-runtime's ConfigFlags for the connection flags (--kubeconfig, --context, -n, --as,
// --server, --token...) and its printers for -o json|yaml|name|jsonpath|go-template.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Exit codes, shared by every subcommand.
const (
	exitOK = 0
	// exitFailed is a failure that is not the input's fault, e.g. the cluster refused, stdout closed.
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

// exitError carries a command's exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a usage mistake or invalid input: exit 2.
func usageError(format string, a ...any) error {
	return &exitError{code: exitInvalid, err: fmt.Errorf(format, a...)}
}

// failure is anything else that went wrong: exit 1.
func failure(err error) error { return &exitError{code: exitFailed, err: err} }

// run executes the command line and returns the exit code. Errors are printed as
// "<command>: <message>"; cobra's own (unknown command or flag) are usage mistakes.
func run(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(name, stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	path := name
	if cmd != nil {
		path = cmd.CommandPath()
	}
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintf(stderr, "%s: %v\n", path, ee.err)
		return ee.code
	}
	// cobra's: an unknown command or a flag it could not parse.
	fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", path, err, path)
	return exitInvalid
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

// invoke runs the CLI as a user would and returns its exit code and output.
func invoke(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run("gpupoolctl", args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// outputFormats is what a bad -o is told to use.
const outputFormats = "json, yaml, kyaml, name, go-template, go-template-file, template, templatefile, jsonpath, jsonpath-as-json, jsonpath-file, wide"

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"status [POLICY]", "why POD", "approve PLAN", "what-if -f SNAPSHOT", "what-if --live", "completion",
			"--as string", "--kubeconfig string", "-n, --namespace string", "--context string"}},
		{[]string{"help"}, []string{"what-if -f SNAPSHOT"}},
		{[]string{"what-if", "--help"}, []string{"kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml", "-f, --filename string",
			"-o, --output string", "--now string", "--policy string", "--live", "--kubeconfig string", "jsonpath"}},
		{[]string{"plan", "-f", "x", "--help"}, []string{"what-if -f SNAPSHOT", "-w, --watch"}},
		{[]string{"help", "what-if"}, []string{"-f, --filename"}},
		{[]string{"help", "why"}, []string{"NotInPool", "PartitionShape", "Allocator", "-n, --namespace string", "gpupool-viewer", "wide"}},
		{[]string{"status", "--help"}, []string{"feasible/eligible", "-w, --watch"}},
		{[]string{"plan", "--help"}, []string{"node by node"}},
		{[]string{"approve", "--help"}, []string{"gpupool.io/approve=<its spec.hash>"}},
		{[]string{"reject", "--help"}, []string{"--reason"}},
		{[]string{"completion", "bash"}, []string{"__start_gpupoolctl"}},
	} {
		code, out, errOut := invoke(t, "", tc.args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: help lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}

// TestUsageMistakes: each is exit 2 with one line on stderr that says what to do, and no API
// call (there is no API server here).
func TestUsageMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "gpupoolctl: name a command (see gpupoolctl --help)"},
		{[]string{"frobnicate"}, `gpupoolctl: unknown command "frobnicate" for "gpupoolctl" (see gpupoolctl --help)`},
		{[]string{"why"}, `gpupoolctl why: want exactly one pod name, e.g. gpupoolctl why trainer-0 -n team-a`},
		{[]string{"why", "a", "b"}, `gpupoolctl why: want exactly one pod name`},
		{[]string{"why", "a", "-o", "xml"}, `gpupoolctl why: -o "xml": want one of ` + outputFormats},
		{[]string{"why", "a", "-oxml"}, `gpupoolctl why: -o "xml": want one of`},
		{[]string{"why", "a", "--frobnicate"}, `gpupoolctl why: unknown flag: --frobnicate (see gpupoolctl why --help)`},
		{[]string{"status", "-x"}, `gpupoolctl status: unknown shorthand flag: 'x' in -x (see gpupoolctl status --help)`},
		{[]string{"plan", "--watch=maybe"}, `gpupoolctl plan: invalid argument "maybe" for "-w, --watch" flag`},
		{[]string{"approve"}, `gpupoolctl approve: want exactly one plan name`},
		{[]string{"reject", "p"}, `gpupoolctl reject: --reason is required`},
		{[]string{"status", "a", "b"}, `gpupoolctl status: want at most one policy name`},
		{[]string{"plan", "a", "b"}, `gpupoolctl plan: want at most one plan name`},
	} {
		code, out, errOut := invoke(t, "", tc.args...)
		if code != exitInvalid || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q on one line of stderr", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestProgramName(t *testing.T) {
	for argv0, want := range map[string]string{
		"/usr/local/bin/kubectl-gpupool": "kubectl gpupool",
		"kubectl-gpupool.exe":            "kubectl gpupool",
		"./gpupoolctl":                   "gpupoolctl",
		"/tmp/go-build123/exe/main":      "gpupoolctl",
	} {
		if got := programName(argv0); got != want {
			t.Errorf("programName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

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

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"status [POLICY]", "why POD", "approve PLAN", "what-if -f SNAPSHOT", "what-if --live"}},
		{[]string{"help"}, []string{"what-if -f SNAPSHOT"}},
		{[]string{"what-if", "--help"}, []string{"kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml", "-f FILE", "-o format", "-now time", "-policy NAME", "-live", "-kubeconfig file"}},
		{[]string{"plan", "-f", "x", "--help"}, []string{"what-if -f FILE"}},
		{[]string{"help", "what-if"}, []string{"-f FILE"}},
		{[]string{"help", "why"}, []string{"NotInPool", "PartitionShape", "Allocator", "-n namespace"}},
		{[]string{"status", "--help"}, []string{"feasible/eligible"}},
		{[]string{"plan", "--help"}, []string{"node by node"}},
		{[]string{"approve", "--help"}, []string{"gpupool.io/approve=<its spec.hash>"}},
		{[]string{"reject", "--help"}, []string{"-reason"}},
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

func TestUsageMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `gpupoolctl: unknown command "frobnicate": run gpupoolctl --help for the commands`},
		{[]string{"why"}, `gpupoolctl why: want exactly one pod name, e.g. gpupoolctl why trainer-0 -n team-a`},
		{[]string{"why", "a", "b"}, `gpupoolctl why: want exactly one pod name`},
		{[]string{"why", "a", "-o", "wide"}, `gpupoolctl why: -o "wide": want table, json or yaml`},
		{[]string{"approve"}, `gpupoolctl approve: want exactly one plan name`},
		{[]string{"reject", "p"}, `gpupoolctl reject: --reason is required`},
		{[]string{"status", "a", "b"}, `gpupoolctl status: want at most one policy name`},
	} {
		code, out, errOut := invoke(t, "", tc.args...)
		if code != exitInvalid || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q on stderr", tc.args, code, out, errOut, tc.want)
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

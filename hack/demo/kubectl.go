// Running kubectl and the gpupoolctl plugin as a user would, echoing each command and its output.

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubectl runs the kubectl built with the control plane (same version as the API server) and
// echoes the command, so the user sees what to type.
func (d *demo) kubectl(args ...string) error { return d.kubectlStdin("", args...) }

func (d *demo) kubectlStdin(stdin string, args ...string) error {
	fmt.Printf("   $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.binDir, "kubectl"), args...)
	// kubectl finds plugins on PATH, takes no flag before a plugin's name, and leaves KUBECONFIG
	// in the plugin's environment, where it reads it as kubectl does.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.cluster.Kubeconfig,
		"PATH="+d.pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Println("     " + line)
	}
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// waitRefused runs a kubectl command that an admission policy must refuse, retrying while the
// API server has not started enforcing a policy created a moment ago, and prints the refusal.
func (d *demo) waitRefused(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		cmd := exec.Command(filepath.Join(d.binDir, "kubectl"), append([]string{"--kubeconfig=" + d.cluster.Kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "may not approve") {
			fmt.Printf("   $ kubectl %s\n     %s\n", strings.Join(args, " "), strings.TrimSpace(string(out)))
			return nil
		}
		if err == nil {
			// Accepted before the policy was active: take the annotation back and try again.
			_ = exec.Command(filepath.Join(d.binDir, "kubectl"), "--kubeconfig="+d.cluster.Kubeconfig,
				"annotate", "repartitionplan", args[len(args)-2], "gpupool.io/approve-").Run()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the approval policy never refused kubectl %s: %s", strings.Join(args, " "), out)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// installPlugin puts the built gpupoolctl on a PATH folder as kubectl-gpupool, as krew does.
func (d *demo) installPlugin() error {
	dir, err := os.MkdirTemp("", "gpupool-demo-plugins-")
	if err != nil {
		return err
	}
	d.pluginDir = dir
	plugin, err := filepath.Abs(d.plugin)
	if err != nil {
		return err
	}
	return os.Symlink(plugin, filepath.Join(dir, "kubectl-gpupool"))
}

// indent prefixes the cluster's progress lines so they read as part of the current step.
type indent struct{}

func (indent) Write(p []byte) (int, error) {
	fmt.Print("   " + string(p))
	return len(p), nil
}

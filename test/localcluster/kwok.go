package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Nodes that kwok should run carry this annotation with value KwokNodeAnnotationValue; kwok is
// started with --manage-all-nodes=false, so it leaves every other Node alone (a test can still
// create bare nodes and set their status itself).
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

const (
	// kwokModule is where the stage YAMLs come from when the cache has no kwok-stages.yaml.
	kwokModule = "sigs.k8s.io/kwok"
	// kwokVersion is KWOK_VERSION in hack/control-plane.sh, used only when the cache has no
	// .kwok.version stamp naming the version of the binary actually built.
	kwokVersion = "v0.8.0"
	// kwokStagesFile is written next to the kwok binary by hack/control-plane.sh.
	kwokStagesFile = "kwok-stages.yaml"
)

// kwokStageFiles are kwokctl's default stages, under kustomize/stage of the kwok module: nodes
// become Ready and keep a Lease, pods become Running, complete, and are deleted at once when
// terminating. The standalone kwok binary has none built in and exits with "no stages found".
// Keep in step with KWOK_STAGE_FILES in hack/control-plane.sh.
var kwokStageFiles = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}

// kwokArgs are kwok's flags. Options go on the command line rather than in a KwokConfiguration
// in the -c file: with one there kwok skips its defaults and fails on zero parallelism.
func kwokArgs(kubeconfig, stages string, serverPort int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue,
		// Pod IPs from a range apart from the service CIDR (10.96.0.0/16).
		"--cidr=10.244.0.0/16",
		"--node-ip=10.1.0.1",
		// Enables the lease controller: the node-lifecycle controller keeps nodes Ready from
		// their Leases, since the stage's full status heartbeat runs only every 10-20 minutes.
		"--node-lease-duration-seconds=40",
		// kwok serves /healthz here once its controllers have started; without the flag it
		// listens nowhere and its readiness could not be told.
		fmt.Sprintf("--server-address=127.0.0.1:%d", serverPort),
	}
}

// kwokStages returns the path of a file holding only kwok's Stage objects: the one
// hack/control-plane.sh keeps in binDir, or else one assembled in workDir from the kwok module
// in the Go module cache (for a cache built before the script wrote the file).
func kwokStages(ctx context.Context, binDir, workDir string) (string, error) {
	cached := filepath.Join(binDir, kwokStagesFile)
	if info, err := os.Stat(cached); err == nil && info.Size() > 0 {
		return cached, nil
	}
	version := kwokVersion
	if stamp, err := os.ReadFile(filepath.Join(binDir, ".kwok.version")); err == nil && len(bytes.TrimSpace(stamp)) > 0 {
		version = string(bytes.TrimSpace(stamp))
	}
	src, err := moduleDir(ctx, kwokModule+"@"+version)
	if err != nil {
		return "", fmt.Errorf("%s is missing from %s and its stages could not be read from the Go module cache: %w; "+
			"run `make control-plane` to write it", kwokStagesFile, binDir, err)
	}
	var out bytes.Buffer
	for _, f := range kwokStageFiles {
		stage, err := os.ReadFile(filepath.Join(src, "kustomize", "stage", filepath.FromSlash(f)))
		if err != nil {
			return "", fmt.Errorf("reading kwok stage %s of %s@%s: %w; run `make control-plane` to write %s",
				f, kwokModule, version, err, filepath.Join(binDir, kwokStagesFile))
		}
		out.WriteString("---\n")
		out.Write(stage)
		if !bytes.HasSuffix(stage, []byte("\n")) {
			out.WriteString("\n")
		}
	}
	path := filepath.Join(workDir, kwokStagesFile)
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// moduleDir asks the go command where module@version is extracted, downloading it only when the
// module cache lacks it. It runs outside any module, so the caller's go.mod, vendor folder and
// go.work neither matter nor get touched.
func moduleDir(ctx context.Context, moduleAtVersion string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", moduleAtVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, runErr := cmd.Output()
	// On failure `go mod download -json` still prints the module with an Error field.
	var mod struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(stdout, &mod); err != nil || mod.Error != "" || runErr != nil {
		switch {
		case mod.Error != "":
			return "", fmt.Errorf("go mod download %s: %s", moduleAtVersion, mod.Error)
		case runErr != nil:
			return "", fmt.Errorf("go mod download %s: %w: %s", moduleAtVersion, runErr, strings.TrimSpace(stderr.String()))
		default:
			return "", fmt.Errorf("go mod download %s: reading its output: %w", moduleAtVersion, err)
		}
	}
	if mod.Dir == "" {
		return "", errors.New("go mod download " + moduleAtVersion + " printed no Dir")
	}
	return mod.Dir, nil
}

// Package testenv starts a real etcd and kube-apiserver (controller-runtime's envtest) with
// gpupool's CRDs installed, for tests that must meet the API server users meet.
//
// The binaries come from the control-plane cache that hack/control-plane.sh fills; `make test`
// builds them first. KUBEBUILDER_ASSETS overrides where they are looked for.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Epoch is the fake clock's starting time: fixed, so that tests which print times are stable.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Env is a running API server with gpupool's CRDs, a client for it and a fake clock for the
// code under test.
type Env struct {
	// Config reaches the API server as cluster-admin.
	Config *rest.Config
	// Client is an uncached client with Scheme.
	Client client.Client
	// Scheme knows the built-in kinds and gpupool's.
	Scheme *k8sruntime.Scheme
	// Clock is injected into the code under test; tests step it instead of sleeping.
	Clock *clocktesting.FakeClock
	// RepoRoot is the checkout's root folder, for tests that read config/ files.
	RepoRoot string

	environment *envtest.Environment
}

// NewScheme returns a scheme with the built-in kinds and gpupool's.
func NewScheme() (*k8sruntime.Scheme, error) {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme, gpupoolv1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return scheme, nil
}

// Start starts etcd and kube-apiserver and installs the CRDs from config/crd/bases.
// Call Stop when done; a test binary that exits without it leaves the processes running.
func Start() (*Env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root)
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	environment := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := environment.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest with binaries from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = environment.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{
		Config:      cfg,
		Client:      c,
		Scheme:      scheme,
		Clock:       clocktesting.NewFakeClock(Epoch),
		RepoRoot:    root,
		environment: environment,
	}, nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error {
	if e == nil || e.environment == nil {
		return nil
	}
	return e.environment.Stop()
}

// repoRoot finds the checkout from this file's location, so tests work from any package folder.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the testenv package's source file")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("repository root not found above %s: %w", file, err)
	}
	return filepath.Abs(root)
}

// assetsDir returns the folder holding etcd and kube-apiserver, with an error saying how to
// build them when they are missing.
func assetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := exec.Command(filepath.Join(root, "hack", "control-plane.sh"), "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("asking hack/control-plane.sh for the control-plane cache: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make test-assets` (or `make test`), "+
				"which builds it from Go modules once per machine", name, dir)
		}
	}
	return dir, nil
}

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The tests build the images for the host's architecture only (four cgo and
// non-cgo builds take minutes on two cores); `make images` builds both. The
// manager is also built for the other architecture, which needs no C
// toolchain, so that the index's platforms are checked.

var (
	once      sync.Once
	built     options
	buildErr  error
	skipAgent string
)

// testOptions are the options of `make images`, writing into out.
func testOptions(t testing.TB, out string, images ...string) options {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = t.TempDir()
	}
	o := options{Root: root, Out: out, Archs: []string{runtime.GOARCH}, Images: images, Go: "go",
		DebCache: filepath.Join(cache, "gpupool", "debs"), Source: "https://github.com/gpupool/gpupool"}
	if err := o.fromGit("0.1.0"); err != nil {
		t.Fatal(err)
	}
	return o
}

// agentUnavailable says why the agent's Debian base cannot be had here, or "".
func agentUnavailable(o options) string {
	pins, err := readLock(filepath.Join(o.Root, "hack", "images", lockFile))
	if err != nil {
		return err.Error()
	}
	for _, p := range pinsFor(pins, runtime.GOARCH) {
		if b, err := os.ReadFile(cachedName(o.DebCache, p)); err == nil && sha256Hex(b) == p.SHA256 {
			continue
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			return "the agent's base is unpacked from Debian packages, and this host has no apt-get"
		}
		if exec.Command("apt-cache", "show", p.Package+":"+p.Arch+"="+p.Version).Run() != nil {
			return fmt.Sprintf("apt offers no %s:%s=%s (run apt-get update as root, or update hack/images/debian.lock)", p.Package, p.Arch, p.Version)
		}
	}
	return ""
}

// images builds both images once for all tests into a shared folder.
func images(t *testing.T) options {
	t.Helper()
	once.Do(func() {
		out, err := os.MkdirTemp("", "gpupool-images-")
		if err != nil {
			buildErr = err
			return
		}
		built = testOptions(t, out, "manager")
		if skipAgent = agentUnavailable(built); skipAgent == "" {
			built.Images = append(built.Images, "agent")
		}
		start := time.Now()
		if _, buildErr = build(built); buildErr != nil {
			return
		}
		t.Logf("built %v for %s in %s", built.Images, runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.Out != "" {
		_ = os.RemoveAll(built.Out)
	}
	os.Exit(code)
}

// readIndex opens an image's layout and returns its only index and the
// layout's entry for it.
func readIndex(t *testing.T, dir string) (v1.ImageIndex, v1.Descriptor) {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("%s/index.json: want one image index, got %+v", dir, m.Manifests)
	}
	idx, err := l.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, m.Manifests[0]
}

// platformImages returns the index's images by GOARCH, checking each
// manifest's platform against its config.
func platformImages(t *testing.T, idx v1.ImageIndex) map[string]v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]v1.Image{}
	for _, d := range m.Manifests {
		if !d.MediaType.IsImage() || d.Platform == nil {
			t.Fatalf("index entry %+v: want an image manifest with a platform", d)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if want := platform(d.Platform.Architecture); d.Platform.OS != want.OS || d.Platform.Variant != want.Variant || cf.OS != want.OS ||
			cf.Architecture != want.Architecture || cf.Variant != want.Variant {
			t.Errorf("descriptor platform %+v, config %s/%s/%s; want %+v", d.Platform, cf.OS, cf.Architecture, cf.Variant, want)
		}
		out[d.Platform.Architecture] = img
	}
	return out
}

// files flattens an image's layers into a tree.
func files(t *testing.T, img v1.Image) tree {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr, err := readTarTree(rc)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// checkLayers checks that every layer is a tar with sorted names, root
// owners, no names and no times other than allowed.
func checkLayers(t *testing.T, img v1.Image, epoch time.Time) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		var names []string
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name)
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.After(epoch) && i == len(layers)-1 {
				t.Errorf("layer %d %s: owner %d:%d (%q:%q), time %s", i, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
			}
			if !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
				t.Errorf("layer %d %s: access or change time set", i, h.Name)
			}
		}
		_ = rc.Close()
		if !slices.IsSorted(names) {
			t.Errorf("layer %d: entries not sorted: %v", i, names)
		}
	}
}

// checkConfig checks what both images share: user, entrypoint, created and
// labels, and the manifest's annotations.
func checkConfig(t *testing.T, o options, name string, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/" + name}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("%s: user %q, entrypoint %q, cmd %q", name, cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if !cf.Created.Equal(o.Epoch) {
		t.Errorf("%s: created %s, want the commit's time %s", name, cf.Created, o.Epoch)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(o.Epoch) {
			t.Errorf("%s: history %q created %s", name, h.CreatedBy, h.Created)
		}
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations(t, o, name+" manifest", m.Annotations)
	checkAnnotations(t, o, name+" config labels", cf.Config.Labels)
	checkLayers(t, img, o.Epoch)
}

func checkAnnotations(t *testing.T, o options, what string, got map[string]string) {
	t.Helper()
	for k, v := range map[string]string{
		annSource: "https://github.com/gpupool/gpupool", annRevision: o.Revision, annVersion: o.Tag,
		annCreated: o.Epoch.Format(time.RFC3339),
	} {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(got[annRevision]) {
		t.Errorf("%s: revision %q is not a commit", what, got[annRevision])
	}
}

// checkIndex checks the layout's tag and the index's annotations.
func checkIndex(t *testing.T, o options, name string) v1.ImageIndex {
	t.Helper()
	idx, entry := readIndex(t, filepath.Join(o.Out, name))
	if entry.Annotations[annRefName] != o.Tag {
		t.Errorf("%s: index.json ref.name %q, want %q", name, entry.Annotations[annRefName], o.Tag)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9a-f]{12})?(-dirty)?$`).MatchString(o.Tag) {
		t.Errorf("tag %q is neither vX.Y.Z nor vX.Y.Z-<commit>", o.Tag)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations(t, o, name+" index", m.Annotations)
	tag, err := os.ReadFile(filepath.Join(o.Out, "TAG"))
	if err != nil || strings.TrimSpace(string(tag)) != o.Tag {
		t.Errorf("TAG file: %q, %v; want %q", tag, err, o.Tag)
	}
	return idx
}

// extract writes a tree under dir, links as links.
func extract(t *testing.T, tr tree, dir string) {
	t.Helper()
	for _, name := range tr.names() {
		n, p := tr[name], filepath.Join(dir, name)
		var err error
		switch n.Type {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = os.WriteFile(p, n.Data, os.FileMode(n.Mode&0o777))
		case tar.TypeSymlink:
			err = os.Symlink(n.Link, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, n.Link), p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runIn runs a command with a timeout and returns its exit code and output.
func runIn(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=/nonexistent"}
	cmd.Dir = t.TempDir()
	// A non-zero exit is an error here; the exit code below is what the tests check.
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not exit within a minute:\n%s", name, args, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

func TestManagerImage(t *testing.T) {
	o := images(t)
	// The manager is static, so the other architecture costs only a compile.
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	multi := o
	multi.Archs, multi.Images, multi.Out = []string{runtime.GOARCH, other}, []string{"manager"}, t.TempDir()
	if _, err := build(multi); err != nil {
		t.Fatal(err)
	}
	idx := checkIndex(t, multi, "manager")
	imgs := platformImages(t, idx)
	if len(imgs) != 2 || imgs["amd64"] == nil || imgs["arm64"] == nil {
		t.Fatalf("manager index: want amd64 and arm64 images, got %v", imgs)
	}
	for arch, img := range imgs {
		checkConfig(t, multi, "manager", img)
		tr := files(t, img)
		if names := tr.names(); !slices.Equal(names, []string{"manager"}) {
			t.Errorf("manager %s: files %v, want only the binary", arch, names)
		}
		if n := tr["manager"]; n == nil || n.Mode != 0o755 || n.Uid != 0 {
			t.Errorf("manager %s: binary %+v", arch, n)
		}
		if interp, _, err := elfDeps(tr["manager"].Data); err != nil || interp != "" {
			t.Errorf("manager %s: not a static binary (interpreter %q, %v)", arch, interp, err)
		}
	}

	// The entrypoint as unpacked from the host architecture's own layers.
	root := t.TempDir()
	extract(t, files(t, imgs[runtime.GOARCH]), root)
	code, out := runIn(t, filepath.Join(root, "manager"), "--help")
	if code != 0 || !strings.Contains(out, "Usage of") || !strings.Contains(out, "-metrics-bind-address") {
		t.Errorf("/manager --help: exit %d, want 0 and the usage:\n%s", code, out)
	}

	// The other architecture's too, where qemu's user-mode emulator is installed.
	qemu := "qemu-" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[other] + "-static"
	if _, err := exec.LookPath(qemu); err != nil {
		t.Logf("%s not installed: the %s manager is not run", qemu, other)
		return
	}
	root = t.TempDir()
	extract(t, files(t, imgs[other]), root)
	code, out = runIn(t, qemu, filepath.Join(root, "manager"), "--help")
	if code != 0 || !strings.Contains(out, "-metrics-bind-address") {
		t.Errorf("%s /manager --help: exit %d, want 0 and the usage:\n%s", other, code, out)
	}
}

func TestAgentImage(t *testing.T) {
	o := images(t)
	if skipAgent != "" {
		t.Skip(skipAgent)
	}
	idx := checkIndex(t, o, "agent")
	imgs := platformImages(t, idx)
	img := imgs[runtime.GOARCH]
	if len(imgs) != 1 || img == nil {
		t.Fatalf("agent index: want the %s image, got %v", runtime.GOARCH, imgs)
	}
	checkConfig(t, o, "agent", img)
	if layers, _ := img.Layers(); len(layers) != 2 {
		t.Errorf("agent: %d layers, want the Debian base and the binary", len(layers))
	}
	tr := files(t, img)
	triplet := crossTriplets[runtime.GOARCH]
	loader := map[string]string{"amd64": "lib64/ld-linux-x86-64.so.2", "arm64": "lib/ld-linux-aarch64.so.1"}[runtime.GOARCH]
	for _, p := range []string{"agent", loader, "lib/" + triplet + "/libc.so.6", "lib/" + triplet + "/libgcc_s.so.1",
		"etc/os-release", "var/lib/dpkg/status.d/libc6", "usr/share/doc/libc6/copyright", "usr/share/doc/libgcc-s1/copyright"} {
		if n, err := tr.resolve(p); err != nil || n.Type != tar.TypeReg {
			t.Errorf("agent: /%s missing: %v", p, err)
		}
	}
	if n := tr["var/lib/dpkg/status.d/libc6"]; n != nil && !bytes.Contains(n.Data, []byte("Package: libc6\n")) {
		t.Errorf("status.d/libc6: %q", n.Data)
	}
	for name := range tr {
		if strings.HasPrefix(name, "usr/bin") || strings.HasPrefix(name, "bin/") || name == "etc/passwd" {
			t.Errorf("agent: unexpected /%s (the base is libc6, not a system)", name)
		}
	}
	interp, needed, err := elfDeps(tr["agent"].Data)
	if err != nil || interp == "" || !slices.Contains(needed, "libc.so.6") {
		t.Fatalf("agent: interpreter %q, needs %v (%v); want a dynamically linked glibc binary", interp, needed, err)
	}

	// Run the entrypoint as unpacked from the image's own layers, through the
	// image's own loader and libraries (not the host's): with no NVIDIA
	// driver here it must say so and fail.
	root := t.TempDir()
	extract(t, tr, root)
	ld, err := tr.resolve(interp)
	if err != nil {
		t.Fatal(err)
	}
	libPath := filepath.Join(root, "lib", triplet) + ":" + filepath.Join(root, "usr", "lib", triplet)
	code, out := runIn(t, filepath.Join(root, ld.Name), "--inhibit-cache", "--library-path", libPath, filepath.Join(root, "agent"), "--probe")
	t.Logf("/agent --probe through the image's loader: exit %d\n%s", code, out)
	if hostHasNVML() {
		t.Logf("this host has libnvidia-ml.so.1: --probe exited %d\n%s", code, out)
		if code == 0 && !json.Valid([]byte(out)) {
			t.Errorf("--probe exited 0 without a JSON report:\n%s", out)
		}
		return
	}
	if code != 1 || !strings.Contains(out, "NVML not found: this machine has no NVIDIA driver (libnvidia-ml.so.1)") ||
		!strings.Contains(out, "reason=NVMLNotFound") {
		t.Errorf("/agent --probe without a driver: exit %d, want 1 and the no-NVML message:\n%s", code, out)
	}
}

// hostHasNVML says whether the host's loader could find an NVIDIA driver.
func hostHasNVML() bool {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64"} {
		if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err == nil {
			return true
		}
	}
	return false
}

func TestReproducible(t *testing.T) {
	o := images(t)
	first := map[string]v1.Hash{}
	for _, name := range o.Images {
		idx, _ := readIndex(t, filepath.Join(o.Out, name))
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		first[name] = d
	}
	again := o
	again.Out = t.TempDir()
	second, err := build(again)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range o.Images {
		if first[name] != second[name] {
			t.Errorf("%s: built twice from one tree, digests %s and %s", name, first[name], second[name])
		}
	}
	a, _ := os.ReadFile(filepath.Join(o.Out, "DIGESTS"))
	b, _ := os.ReadFile(filepath.Join(again.Out, "DIGESTS"))
	if !bytes.Equal(a, b) || len(a) == 0 {
		t.Errorf("DIGESTS differ:\n%s\n%s", a, b)
	}
}

// TestAgentBaseOverride builds the agent on a base from an OCI layout, as an
// air-gapped site would, and refuses a base its binary cannot start on.
func TestAgentBaseOverride(t *testing.T) {
	o := images(t)
	if skipAgent != "" {
		t.Skip(skipAgent)
	}
	pins, err := readLock(filepath.Join(o.Root, "hack", "images", lockFile))
	if err != nil {
		t.Fatal(err)
	}
	base, err := debianTree(o.DebCache, pinsFor(pins, runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	if err := base.add(&node{Name: "etc/site-ca.pem", Type: tar.TypeReg, Mode: 0o644, Data: []byte("site\n")}); err != nil {
		t.Fatal(err)
	}
	writeBase := func(tr tree) string {
		l, err := layer(tr, types.DockerLayer)
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image, l)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		p := platform(runtime.GOARCH)
		cf.OS, cf.Architecture = p.OS, p.Architecture
		cf.Config.Env = []string{"SITE=1"}
		cf.Config.User = "0"
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		// A single Docker-format image without a platform, named like a mirror would.
		if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{annRefName: "mirror.example/glibc:12"})); err != nil {
			t.Fatal(err)
		}
		return dir
	}

	ov := testOptions(t, t.TempDir(), "agent")
	ov.AgentBase = writeBase(base)
	if _, err := build(ov); err != nil {
		t.Fatal(err)
	}
	idx, _ := readIndex(t, filepath.Join(ov.Out, "agent"))
	img := platformImages(t, idx)[runtime.GOARCH]
	if img == nil {
		t.Fatal("no image for the host's architecture")
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cf.Config.Env, "SITE=1") || cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/agent"}) {
		t.Errorf("config on the site base: env %q, user %q, entrypoint %q", cf.Config.Env, cf.Config.User, cf.Config.Entrypoint)
	}
	m, _ := img.Manifest()
	if m.Annotations[annBaseName] != "mirror.example/glibc:12" || !strings.HasPrefix(m.Annotations[annBaseDigest], "sha256:") {
		t.Errorf("base annotations: %v", m.Annotations)
	}
	if m.MediaType != types.DockerManifestSchema2 || m.Layers[len(m.Layers)-1].MediaType != types.DockerLayer {
		t.Errorf("on a Docker-format base: manifest %s, agent layer %s; want Docker types throughout", m.MediaType, m.Layers[len(m.Layers)-1].MediaType)
	}
	tr := files(t, img)
	for _, p := range []string{"agent", "etc/site-ca.pem"} {
		if tr[p] == nil {
			t.Errorf("agent on the site base: /%s missing", p)
		}
	}

	// A base without glibc (here: only a file) must be refused, naming what is missing.
	bad := testOptions(t, t.TempDir(), "agent")
	bad.AgentBase = writeBase(tree{"etc/site-ca.pem": {Name: "etc/site-ca.pem", Type: tar.TypeReg, Mode: 0o644}, "etc": {Name: "etc", Type: tar.TypeDir, Mode: 0o755}})
	_, err = build(bad)
	if err == nil || !strings.Contains(err.Error(), "cannot start on its base") || !strings.Contains(err.Error(), "libc.so.6 is missing") {
		t.Errorf("agent on a base without glibc: %v", err)
	}
	fmt.Fprintln(os.Stderr) // keep go test's output readable after the builds' logs
}

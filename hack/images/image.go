package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation keys (image-spec annotations.md).
const (
	annSource      = "org.opencontainers.image.source"
	annRevision    = "org.opencontainers.image.revision"
	annVersion     = "org.opencontainers.image.version"
	annCreated     = "org.opencontainers.image.created"
	annTitle       = "org.opencontainers.image.title"
	annDescription = "org.opencontainers.image.description"
	annRefName     = "org.opencontainers.image.ref.name"
	annBaseName    = "org.opencontainers.image.base.name"
	annBaseDigest  = "org.opencontainers.image.base.digest"
)

// nonRoot is the user every image runs as unless the pod says otherwise
// (the agent's DaemonSet runs it as 0 to reach the kubelet's socket).
const nonRoot = "65532:65532"

// imageSpec is what differs between the two images.
type imageSpec struct {
	Name        string // the binary, the layout folder and the title's suffix
	Package     string // the Go package built
	Cgo         bool   // needs cgo, and so glibc in the image
	Description string
}

var specs = map[string]imageSpec{
	"manager": {Name: "manager", Package: "./cmd/manager",
		Description: "gpupool's manager: the controllers that plan and carry out GPU repartitioning"},
	"agent": {Name: "agent", Package: "./cmd/agent", Cgo: true,
		Description: "gpupool's node agent: reads NVML (injected by the NVIDIA container toolkit) and publishes GPUNode status"},
}

// options are the build's inputs; the same options give the same digests.
type options struct {
	Root      string   // the repository
	Out       string   // where layouts, binaries and TAG go
	Archs     []string // GOARCH values
	Images    []string // keys of specs
	AgentBase string   // an OCI layout to use instead of the Debian base
	DebCache  string
	Go        string // the go command

	Tag      string
	Revision string
	Source   string
	Epoch    time.Time
}

// platform returns the OCI platform of a GOARCH.
func platform(arch string) v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// crossTriplets are the GNU triplets of the C cross compilers cgo uses.
var crossTriplets = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// buildBinary compiles one binary for linux/arch, reproducibly: no paths, no
// build ID, no VCS stamp, a fixed instruction-set level.
func buildBinary(o options, s imageSpec, arch string) ([]byte, error) {
	out := filepath.Join(o.Out, "bin", "linux_"+arch, s.Name)
	cmd := exec.Command(o.Go, "build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=", "-o", out, s.Package)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=")
	if s.Cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
		if arch != runtime.GOARCH || runtime.GOOS != "linux" {
			cc := os.Getenv("CC_" + arch)
			if cc == "" {
				cc = crossTriplets[arch] + "-gcc"
			}
			_, err := exec.LookPath(cc)
			if _, herr := os.Stat("/usr/" + crossTriplets[arch] + "/include/stdio.h"); err != nil || herr != nil && os.Getenv("CC_"+arch) == "" {
				return nil, fmt.Errorf("the agent needs cgo (go-nvml), and cgo for linux/%s needs a C cross compiler and that architecture's C library: run `apt-get install gcc-%s libc6-dev-%s-cross` (or set CC_%s)",
					arch, strings.ReplaceAll(crossTriplets[arch], "_", "-"), arch, arch)
			}
			cmd.Env = append(cmd.Env, "CC="+cc)
		}
	} else {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s for linux/%s: %w\n%s", s.Package, arch, err, stderr.String())
	}
	return os.ReadFile(out)
}

// layer makes an OCI (or, on a Docker-format base, Docker) gzip layer of t.
func layer(t tree, mt types.MediaType) (v1.Layer, error) {
	b, err := t.tarball()
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(mt))
}

// annotations are set on every manifest and index, and as config labels.
func (o options) annotations(s imageSpec) map[string]string {
	return map[string]string{
		annSource:      o.Source,
		annRevision:    o.Revision,
		annVersion:     o.Tag,
		annCreated:     o.Epoch.UTC().Format(time.RFC3339),
		annTitle:       "gpupool-" + s.Name,
		annDescription: s.Description,
	}
}

// base returns the image the binary's layer goes on and a description of it:
// nothing for a static binary, the pinned Debian packages or AGENT_BASE for
// a cgo one.
func base(o options, s imageSpec, arch string) (v1.Image, tree, map[string]string, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if !s.Cgo {
		return img, tree{}, nil, nil
	}
	if o.AgentBase != "" {
		return layoutBase(o.AgentBase, arch)
	}
	pins, err := readLock(filepath.Join(o.Root, "hack", "images", lockFile))
	if err != nil {
		return nil, nil, nil, err
	}
	pins = pinsFor(pins, arch)
	t, err := debianTree(o.DebCache, pins)
	if err != nil {
		return nil, nil, nil, err
	}
	l, err := layer(t, types.OCILayer)
	if err != nil {
		return nil, nil, nil, err
	}
	var pkgs []string
	for _, p := range pins {
		pkgs = append(pkgs, p.Package+"="+p.Version)
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
		Created:   v1.Time{Time: o.Epoch},
		CreatedBy: "hack/images: Debian " + arch + " packages " + strings.Join(pkgs, " "),
		Comment:   "pinned in hack/images/debian.lock",
	}})
	return img, t, nil, err
}

// layoutBase finds the linux/arch image in an OCI layout (a multi-arch
// index, or single images with or without a platform) and returns it with its
// flattened file tree.
func layoutBase(dir, arch string) (v1.Image, tree, map[string]string, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("AGENT_BASE=%s: %w", dir, err)
	}
	img, name, err := findImage(idx, platform(arch), "")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("AGENT_BASE=%s: %w", dir, err)
	}
	if img == nil {
		return nil, nil, nil, fmt.Errorf("AGENT_BASE=%s holds no linux/%s image", dir, arch)
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	t, err := readTarTree(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("AGENT_BASE=%s: reading its files: %w", dir, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, nil, nil, err
	}
	ann := map[string]string{annBaseDigest: d.String()}
	if name != "" {
		ann[annBaseName] = name
	}
	return img, t, ann, nil
}

// findImage walks an index depth first for an image of platform p.
func findImage(idx v1.ImageIndex, p v1.Platform, name string) (v1.Image, string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	for _, d := range im.Manifests {
		n := name
		if r := d.Annotations[annRefName]; r != "" && n == "" {
			n = r
		}
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, "", err
			}
			if img, found, err := findImage(child, p, n); err != nil || img != nil {
				return img, found, err
			}
		case d.MediaType.IsImage():
			if d.Platform != nil && (d.Platform.OS != p.OS || d.Platform.Architecture != p.Architecture) {
				continue
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, "", err
			}
			cf, err := img.ConfigFile()
			if err != nil {
				return nil, "", err
			}
			if cf.OS == p.OS && cf.Architecture == p.Architecture {
				return img, n, nil
			}
		}
	}
	return nil, "", nil
}

// buildImage builds one image for one architecture.
func buildImage(o options, s imageSpec, arch string) (v1.Image, error) {
	bin, err := buildBinary(o, s, arch)
	if err != nil {
		return nil, err
	}
	img, files, baseAnn, err := base(o, s, arch)
	if err != nil {
		return nil, err
	}
	if err := checkRuntime(files, bin, arch); err != nil {
		return nil, fmt.Errorf("%s for linux/%s cannot start on its base: %w", s.Name, arch, err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	layerType := types.OCILayer
	if mt == types.DockerManifestSchema2 {
		layerType = types.DockerLayer
	}
	l, err := layer(tree{s.Name: {Name: s.Name, Type: tar.TypeReg, Mode: 0o755, ModTime: o.Epoch.Unix(), Data: bin}}, layerType)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
		Created:   v1.Time{Time: o.Epoch},
		CreatedBy: fmt.Sprintf("go build -trimpath -ldflags=-buildid= %s (GOOS=linux GOARCH=%s CGO_ENABLED=%d)", s.Package, arch, map[bool]int{false: 0, true: 1}[s.Cgo]),
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	p := platform(arch)
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: o.Epoch}
	cf.Author = ""
	cf.Config.User = nonRoot
	cf.Config.Entrypoint = []string{"/" + s.Name}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	ann := o.annotations(s)
	for k, v := range baseAnn {
		ann[k] = v
	}
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range ann {
		cf.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}

// buildIndex builds one image for every architecture and their index.
func buildIndex(o options, s imageSpec) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.Archs {
		img, err := buildImage(o, s, arch)
		if err != nil {
			return nil, err
		}
		p := platform(arch)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, o.annotations(s)).(v1.ImageIndex), nil
}

// writeLayout writes idx as the only entry of a fresh OCI layout at dir,
// tagged o.Tag.
func writeLayout(dir string, idx v1.ImageIndex, tag string) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{annRefName: tag})); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// build writes every image's layout under o.Out, the tag to o.Out/TAG and
// each index digest to o.Out/DIGESTS, and returns the digests by image.
func build(o options) (map[string]v1.Hash, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	digests := map[string]v1.Hash{}
	var lines []string
	for _, name := range o.Images {
		s, ok := specs[name]
		if !ok {
			return nil, fmt.Errorf("unknown image %q (manager or agent)", name)
		}
		idx, err := buildIndex(o, s)
		if err != nil {
			return nil, err
		}
		if err := writeLayout(filepath.Join(o.Out, name), idx, o.Tag); err != nil {
			return nil, err
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		digests[name] = d
		lines = append(lines, fmt.Sprintf("%s %s %s", name, o.Tag, d))
	}
	if err := os.WriteFile(filepath.Join(o.Out, "TAG"), []byte(o.Tag+"\n"), 0o644); err != nil {
		return nil, err
	}
	return digests, os.WriteFile(filepath.Join(o.Out, "DIGESTS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// lockFile pins the Debian packages of the agent's base layer.
const lockFile = "debian.lock"

// pin is one line of debian.lock.
type pin struct {
	Package, Arch, Version, SHA256 string
}

// debFilter keeps only some paths of a package; packages not named here are
// unpacked whole. base-files gives the image the os-release that scanners
// read to know it is Debian; the rest of base-files is a whole system's
// skeleton the agent has no use for.
var debFilter = map[string][]string{
	"base-files": {"etc/debian_version", "etc/os-release", "usr/lib/os-release"},
}

// defaultPackages start a debian.lock that does not exist yet.
var defaultPackages = []string{"libc6", "libgcc-s1", "gcc-12-base", "base-files"}

// lockHeader is written at the top of debian.lock by `go run . lock`.
const lockHeader = `# Debian packages unpacked into the agent image's base layer (glibc, as distroless does),
# pinned by version and SHA-256 so that one commit always builds the same image.
# libc6 needs libgcc-s1, whose copyright is in gcc-12-base; base-files gives /etc/os-release.
# Update: go -C hack/images run . lock   (needs apt-get; for arm64 first
# dpkg --add-architecture arm64 && apt-get update), then commit this file.
# package arch version sha256
`

// readLock parses debian.lock.
func readLock(file string) ([]pin, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pins []pin
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 4 || len(f[3]) != 64 {
			return nil, fmt.Errorf("%s:%d: want `package arch version sha256`, got %q", file, line, text)
		}
		pins = append(pins, pin{Package: f[0], Arch: f[1], Version: f[2], SHA256: f[3]})
	}
	return pins, sc.Err()
}

// pinsFor returns the pins of one architecture.
func pinsFor(pins []pin, arch string) []pin {
	var out []pin
	for _, p := range pins {
		if p.Arch == arch {
			out = append(out, p)
		}
	}
	return out
}

// fetchDeb returns the bytes of a pinned package: from the cache folder when
// it holds the right file, else downloaded by apt-get and checked.
func fetchDeb(cache string, p pin) ([]byte, error) {
	cached := cachedName(cache, p)
	if b, err := os.ReadFile(cached); err == nil && sha256Hex(b) == p.SHA256 {
		return b, nil
	}
	spec := fmt.Sprintf("%s:%s=%s", p.Package, p.Arch, p.Version)
	b, err := aptDownload(cache, spec)
	if err != nil {
		hint := "if Debian no longer serves that version, update the pins with `go -C hack/images run . lock` and commit hack/images/debian.lock"
		if p.Arch != hostDebArch() {
			hint = fmt.Sprintf("for %s packages run `dpkg --add-architecture %s && apt-get update` first; ", p.Arch, p.Arch) + hint
		}
		return nil, fmt.Errorf("%w\n(%s; or set AGENT_BASE to an OCI layout of a glibc base image)", err, hint)
	}
	if got := sha256Hex(b); got != p.SHA256 {
		return nil, fmt.Errorf("apt-get download %s: SHA-256 %s, debian.lock pins %s", spec, got, p.SHA256)
	}
	if err := os.WriteFile(cached+".tmp", b, 0o644); err != nil {
		return nil, err
	}
	return b, os.Rename(cached+".tmp", cached)
}

// cachedName is where the cache keeps a pinned package.
func cachedName(cache string, p pin) string {
	return filepath.Join(cache, fmt.Sprintf("%s_%s_%s.deb", p.Package, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch))
}

// aptDownload runs `apt-get download spec` in a fresh folder under cache and
// returns the one .deb it fetched.
func aptDownload(cache, spec string) ([]byte, error) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return nil, fmt.Errorf("downloading %s needs apt-get (a Debian host)", spec)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// apt's download sandbox user cannot write to a root-owned temporary
	// folder; the warning it prints about that is noise, so the folder is
	// made world-writable for the download.
	_ = os.Chmod(dir, 0o777)
	cmd := exec.Command("apt-get", "download", "-q", spec)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-get download %s: %w\n%s", spec, err, strings.TrimSpace(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s: want one .deb, got %d", spec, len(debs))
	}
	return os.ReadFile(debs[0])
}

// debianTree unpacks the pinned packages of one architecture into one file
// tree. Every time in it is the packages' own, so the base layer is the same
// for every commit until the pins change.
func debianTree(cache string, pins []pin) (tree, error) {
	if len(pins) == 0 {
		return nil, errors.New("debian.lock pins no package for this architecture")
	}
	t := tree{}
	var newest int64
	var debs []*deb
	for _, p := range pins {
		b, err := fetchDeb(cache, p)
		if err != nil {
			return nil, err
		}
		d, err := readDeb(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", p.Package, p.Version, err)
		}
		if d.Package != p.Package || d.Version != p.Version || (d.Architecture != p.Arch && d.Architecture != "all") {
			return nil, fmt.Errorf("%s:%s=%s: the file is %s:%s=%s", p.Package, p.Arch, p.Version, d.Package, d.Architecture, d.Version)
		}
		debs = append(debs, d)
		keep := keepFunc(debFilter[d.Package])
		for _, n := range d.Files {
			newest = max(newest, n.ModTime)
			if !keep(n) {
				continue
			}
			if err := t.add(n); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Package, err)
			}
		}
	}
	// dpkg's database as distroless writes it: one control file per package.
	for _, d := range debs {
		control := bytes.TrimRight(d.Control, "\n")
		if err := t.add(&node{
			Name: path.Join("var/lib/dpkg/status.d", d.Package), Type: tar.TypeReg, Mode: 0o644,
			ModTime: newest, Data: append(control, '\n'),
		}); err != nil {
			return nil, err
		}
	}
	t.addParents(newest)
	return t, nil
}

// keepFunc keeps the listed paths (and the directories above them), or
// everything when the list is empty.
func keepFunc(paths []string) func(*node) bool {
	if len(paths) == 0 {
		return func(*node) bool { return true }
	}
	return func(n *node) bool {
		for _, p := range paths {
			if n.Name == p || strings.HasPrefix(p, n.Name+"/") && n.Type == tar.TypeDir {
				return true
			}
		}
		return false
	}
}

// updateLock resolves every package named in debian.lock, for every
// architecture asked for, to the version apt-get offers now, and rewrites
// the file.
func updateLock(file, cache string, archs []string) error {
	old, err := readLock(file)
	if errors.Is(err, os.ErrNotExist) {
		old, err = nil, nil
	}
	if err != nil {
		return err
	}
	names := []string{}
	if len(old) == 0 {
		names = defaultPackages
	}
	seen := map[string]bool{}
	for _, p := range old {
		if !seen[p.Package] {
			seen[p.Package] = true
			names = append(names, p.Package)
		}
	}
	var out strings.Builder
	out.WriteString(lockHeader)
	for _, arch := range archs {
		for _, name := range names {
			b, err := aptDownload(cache, name+":"+arch)
			if err != nil {
				return err
			}
			d, err := readDeb(bytes.NewReader(b))
			if err != nil {
				return fmt.Errorf("%s:%s: %w", name, arch, err)
			}
			p := pin{Package: name, Arch: arch, Version: d.Version, SHA256: sha256Hex(b)}
			if err := os.WriteFile(cachedName(cache, p), b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(&out, "%s %s %s %s\n", p.Package, p.Arch, p.Version, p.SHA256)
		}
	}
	return os.WriteFile(file, []byte(out.String()), 0o644)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// hostDebArch is this machine's Debian architecture ("" if not Debian).
func hostDebArch() string {
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

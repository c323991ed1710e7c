package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// node is one file, directory or link of an image's file tree.
type node struct {
	Name     string // relative to the root, no leading or trailing "/"
	Type     byte   // tar.TypeReg, TypeDir, TypeSymlink or TypeLink
	Mode     int64  // permission bits
	Uid, Gid int
	ModTime  int64 // seconds since the epoch
	Link     string
	Data     []byte
}

// tree is a file tree keyed by node name.
type tree map[string]*node

// add puts n in t. A directory may be added twice (packages share /usr and
// the like); two different files at one path are an error.
func (t tree) add(n *node) error {
	if old, ok := t[n.Name]; ok {
		if old.Type == tar.TypeDir && n.Type == tar.TypeDir {
			return nil
		}
		if old.Type == n.Type && old.Link == n.Link && bytes.Equal(old.Data, n.Data) {
			return nil
		}
		return fmt.Errorf("%s is provided twice", n.Name)
	}
	t[n.Name] = n
	return nil
}

// addParents adds every missing parent directory (mode 0755, owned by root).
func (t tree) addParents(modTime int64) {
	for name := range t {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := t[dir]; !ok {
				t[dir] = &node{Name: dir, Type: tar.TypeDir, Mode: 0o755, ModTime: modTime}
			}
		}
	}
}

// names returns the sorted names of t.
func (t tree) names() []string {
	out := make([]string, 0, len(t))
	for name := range t {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// tarball writes t as an uncompressed tar stream: entries sorted by name
// (so parents come before children), owners numeric, no user or group names,
// no access or change times. The same tree always gives the same bytes.
func (t tree) tarball() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range t.names() {
		n := t[name]
		h := &tar.Header{
			Typeflag: n.Type,
			Name:     n.Name,
			Mode:     n.Mode,
			Uid:      n.Uid,
			Gid:      n.Gid,
			ModTime:  time.Unix(n.ModTime, 0).UTC(),
			Linkname: n.Link,
			Format:   tar.FormatPAX,
		}
		switch n.Type {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(n.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		if n.Type == tar.TypeReg {
			if _, err := tw.Write(n.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readTarTree reads a flattened image file system (mutate.Extract) into a tree.
func readTarTree(r io.Reader) (tree, error) {
	nodes, err := readTree(tar.NewReader(r))
	if err != nil {
		return nil, err
	}
	t := tree{}
	for _, n := range nodes {
		t[n.Name] = n
	}
	return t, nil
}

// resolve follows symbolic and hard links inside t, as the kernel and the
// dynamic loader would inside the container (absolute links point at the
// image's own root), and returns the node a path finally names.
func (t tree) resolve(p string) (*node, error) {
	const maxLinks = 40
	links := 0
	var walk func(p string) (*node, error)
	walk = func(p string) (*node, error) {
		parts := strings.Split(cleanName(p), "/")
		cur := ""
		for i, part := range parts {
			if part == "" {
				continue
			}
			next := path.Join(cur, part)
			n, ok := t[next]
			if !ok {
				return nil, fmt.Errorf("/%s: no such file in the image", next)
			}
			last := i == len(parts)-1
			switch n.Type {
			case tar.TypeSymlink:
				if links++; links > maxLinks {
					return nil, fmt.Errorf("/%s: too many levels of symbolic links", next)
				}
				target := n.Link
				if !path.IsAbs(target) {
					target = path.Join("/", cur, target)
				}
				rest := strings.Join(parts[i+1:], "/")
				return walk(path.Join(target, rest))
			case tar.TypeLink:
				if !last {
					return nil, fmt.Errorf("/%s: not a directory", next)
				}
				return walk("/" + n.Link)
			case tar.TypeDir:
			default:
				if !last {
					return nil, fmt.Errorf("/%s: not a directory", next)
				}
			}
			cur = next
			if last {
				return n, nil
			}
		}
		if n, ok := t[cur]; ok {
			return n, nil
		}
		return &node{Type: tar.TypeDir}, nil // the root
	}
	return walk(p)
}

// elfDeps returns a dynamically linked executable's interpreter and the
// libraries it needs; both empty for a static binary.
func elfDeps(binary []byte) (interp string, needed []string, err error) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return "", nil, nil
	}
	needed, err = f.ImportedLibraries()
	return interp, needed, err
}

// libraryDirs are where a glibc loader without ld.so.cache looks, by
// architecture (Debian's multiarch directories first).
var libraryDirs = map[string][]string{
	"amd64": {"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"},
	"arm64": {"lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"},
}

// checkRuntime makes sure a dynamically linked binary finds its loader and
// every library it names in t, so that an image never ships an entrypoint
// that cannot start (a musl or empty base, a missing package).
func checkRuntime(t tree, binary []byte, arch string) error {
	interp, needed, err := elfDeps(binary)
	if err != nil {
		return err
	}
	if interp == "" {
		return nil
	}
	var problems []string
	if n, err := t.resolve(interp); err != nil || n.Type != tar.TypeReg {
		problems = append(problems, fmt.Sprintf("the dynamic loader %s is missing", interp))
	}
	for _, lib := range needed {
		found := false
		for _, dir := range libraryDirs[arch] {
			if n, err := t.resolve(path.Join(dir, lib)); err == nil && n.Type == tar.TypeReg {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s is missing", lib))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// deb is one Debian binary package, read into memory: its control file and
// the file tree of its data archive.
type deb struct {
	Package, Version, Architecture string
	// Control is the package's control file (debian/control as installed),
	// written to /var/lib/dpkg/status.d/<package> so that image scanners
	// see which Debian packages the image holds.
	Control []byte
	// Files are the entries of data.tar, named without the leading "./".
	Files []*node
}

// readDeb parses a .deb: an ar archive of debian-binary, control.tar.* and
// data.tar.* (xz, gzip or no compression).
func readDeb(r io.Reader) (*deb, error) {
	members, err := readAr(r)
	if err != nil {
		return nil, err
	}
	d := &deb{}
	var sawData, sawControl bool
	for _, m := range members {
		switch {
		case m.name == "debian-binary":
			if !bytes.HasPrefix(m.data, []byte("2.")) {
				return nil, fmt.Errorf("unsupported deb format %q", strings.TrimSpace(string(m.data)))
			}
		case strings.HasPrefix(m.name, "control.tar"):
			tr, err := decompressedTar(m.name, m.data)
			if err != nil {
				return nil, err
			}
			if err := d.readControl(tr); err != nil {
				return nil, err
			}
			sawControl = true
		case strings.HasPrefix(m.name, "data.tar"):
			tr, err := decompressedTar(m.name, m.data)
			if err != nil {
				return nil, err
			}
			if d.Files, err = readTree(tr); err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			sawData = true
		}
	}
	if !sawControl || !sawData {
		return nil, errors.New("not a Debian package: no control.tar or data.tar member")
	}
	return d, nil
}

// readControl finds ./control in control.tar and parses the fields we need.
func (d *deb) readControl(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("control.tar has no control file")
		}
		if err != nil {
			return err
		}
		if path.Clean(h.Name) != "control" {
			continue
		}
		if d.Control, err = io.ReadAll(tr); err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(d.Control))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok || strings.HasPrefix(k, " ") {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "Package":
				d.Package = v
			case "Version":
				d.Version = v
			case "Architecture":
				d.Architecture = v
			}
		}
		if d.Package == "" || d.Version == "" || d.Architecture == "" {
			return errors.New("control file lacks Package, Version or Architecture")
		}
		return nil
	}
}

func decompressedTar(name string, data []byte) (*tar.Reader, error) {
	var r io.Reader = bytes.NewReader(data)
	switch path.Ext(name) {
	case ".xz":
		xr, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = xr
	case ".gz":
		gr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = gr
	case ".tar":
	default:
		return nil, fmt.Errorf("%s: unsupported compression (this reader knows xz and gzip)", name)
	}
	return tar.NewReader(r), nil
}

// readTree reads a tar stream into nodes named without "./" or "/" prefixes.
func readTree(tr *tar.Reader) ([]*node, error) {
	var out []*node
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		name := cleanName(h.Name)
		if name == "" {
			continue // the archive's root, "./"
		}
		n := &node{Name: name, Mode: h.Mode & 0o7777, ModTime: h.ModTime.Unix(), Uid: h.Uid, Gid: h.Gid}
		switch h.Typeflag {
		case tar.TypeDir:
			n.Type = tar.TypeDir
		case tar.TypeReg:
			n.Type = tar.TypeReg
			if n.Data, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			n.Type, n.Link = tar.TypeSymlink, h.Linkname
		case tar.TypeLink:
			n.Type, n.Link = tar.TypeLink, cleanName(h.Linkname)
		default:
			return nil, fmt.Errorf("%s: unsupported entry type %q", h.Name, h.Typeflag)
		}
		out = append(out, n)
	}
}

// cleanName turns "./usr/lib/" or "/usr/lib" into "usr/lib".
func cleanName(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}

// arMember is one member of an ar archive.
type arMember struct {
	name string
	data []byte
}

// readAr reads a common (System V / GNU) ar archive, as dpkg writes them.
func readAr(r io.Reader) ([]arMember, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, 8)
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != "!<arch>\n" {
		return nil, errors.New("not an ar archive")
	}
	var members []arMember
	hdr := make([]byte, 60)
	for {
		if _, err := io.ReadFull(br, hdr); err == io.EOF {
			return members, nil
		} else if err != nil {
			return nil, fmt.Errorf("ar header: %w", err)
		}
		if string(hdr[58:60]) != "`\n" {
			return nil, errors.New("corrupt ar member header")
		}
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("ar member size %q", hdr[48:58])
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("ar member: %w", err)
		}
		if size%2 == 1 {
			if _, err := br.Discard(1); err != nil && err != io.EOF {
				return nil, err
			}
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(hdr[0:16])), "/")
		members = append(members, arMember{name: name, data: data})
	}
}

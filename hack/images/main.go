// Command images builds gpupool's OCI images, reproducibly, into OCI image
// layout folders: `make images` runs it.
//
//	go -C hack/images run . build -root=$PWD -out=$PWD/_output/images [-arch=amd64,arm64] [-agent-base=DIR]
//	go -C hack/images run . lock [-arch=amd64,arm64]
//
// manager holds only the static manager binary (CGO_ENABLED=0). agent holds
// the agent, which loads NVML with dlopen through cgo and so needs glibc, on
// a base layer unpacked from Debian's own packages (libc6 and what it needs,
// pinned in debian.lock) as distroless does, or on the image of the OCI
// layout -agent-base names. Both run as 65532:65532 with the binary as the
// entrypoint, and carry the OCI source, revision, version and created
// annotations (also as labels).
//
// Every time inside is SOURCE_DATE_EPOCH (default: the commit's time), tar
// entries are sorted with numeric owners, and binaries carry no paths or
// build IDs, so one commit gives the same digests on every build. The tag is
// HEAD's v* tag when it has one, else v<version>-<12-digit commit>, with
// -dirty when the work tree differs from the commit; it is written to
// <out>/TAG and each index digest to <out>/DIGESTS.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := "build"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("images "+cmd, flag.ContinueOnError)
	root := fs.String("root", "../..", "the gpupool repository")
	out := fs.String("out", "", "output folder (default <root>/_output/images)")
	archs := fs.String("arch", "amd64,arm64", "architectures, comma-separated")
	images := fs.String("images", "manager,agent", "images to build, comma-separated")
	agentBase := fs.String("agent-base", os.Getenv("AGENT_BASE"), "an OCI layout folder whose linux/<arch> image replaces the Debian base of the agent (default $AGENT_BASE)")
	cacheDefault := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cacheDefault = filepath.Join(dir, "gpupool", "debs")
	}
	debCache := fs.String("deb-cache", cacheDefault, "where downloaded Debian packages are kept")
	tag := fs.String("tag", "", "image tag (default: HEAD's v* tag, else v<version>-<commit>)")
	version := fs.String("version", "0.1.0", "version in the default tag when HEAD has no v* tag")
	source := fs.String("source", "https://github.com/gpupool/gpupool", "org.opencontainers.image.source")
	goCmd := fs.String("go", "go", "the go command")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	switch cmd {
	case "lock":
		return updateLock(filepath.Join(absRoot, "hack", "images", lockFile), *debCache, split(*archs))
	case "build":
	default:
		return fmt.Errorf("unknown command %q (build or lock)", cmd)
	}
	o := options{
		Root: absRoot, Out: *out, Archs: split(*archs), Images: split(*images), DebCache: *debCache,
		Go: *goCmd, Tag: *tag, Source: *source,
	}
	if o.Out == "" {
		o.Out = filepath.Join(absRoot, "_output", "images")
	}
	if *agentBase != "" {
		if o.AgentBase, err = filepath.Abs(*agentBase); err != nil {
			return err
		}
	}
	if err := o.fromGit(*version); err != nil {
		return err
	}
	start := time.Now()
	digests, err := build(o)
	if err != nil {
		return err
	}
	for _, name := range o.Images {
		fmt.Printf("%-8s %s:%s  %s  (%s)\n", name, filepath.Join(o.Out, name), o.Tag, digests[name], strings.Join(o.Archs, ", "))
	}
	fmt.Printf("tag %s written to %s (%s)\n", o.Tag, filepath.Join(o.Out, "TAG"), time.Since(start).Round(time.Second))
	return nil
}

// fromGit fills in the revision, the epoch and, unless set, the tag.
func (o *options) fromGit(version string) error {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = o.Root
		b, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return strings.TrimSpace(string(b)), err
	}
	var err error
	if o.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	o.Epoch = time.Unix(secs, 0).UTC()
	if o.Tag != "" {
		return nil
	}
	if t, err := git("describe", "--tags", "--exact-match", "--match=v*", "HEAD"); err == nil && t != "" {
		o.Tag = t
	} else {
		o.Tag = "v" + strings.TrimPrefix(version, "v") + "-" + o.Revision[:12]
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		return err
	}
	if status != "" {
		o.Tag += "-dirty"
	}
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

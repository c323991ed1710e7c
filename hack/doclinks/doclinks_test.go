// Package doclinks holds the repository's documentation to two rules: every link resolves to a
// file in the repository, and none points outside it (air-gapped sites read the docs from the
// checkout; a link outside goes stale without anyone noticing).
package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, from this package's folder.
const root = "../.."

// skipped are folders whose Markdown is not the project's documentation.
var skipped = map[string]bool{".git": true, "hack/tools": true, "node_modules": true, "vendor": true}

var (
	link  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	code  = regexp.MustCompile("`[^`]*`")
	issue = regexp.MustCompile(`(?i)\bissues? #?[0-9]+\b`)
)

func TestDocumentationLinksStayInTheRepository(t *testing.T) {
	pages := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipped[filepath.ToSlash(rel)] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		pages++
		checkPage(t, path, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages < 10 {
		t.Fatalf("found only %d Markdown pages under %s: is the walk looking in the right place?", pages, root)
	}
}

func checkPage(t *testing.T, path, rel string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for n, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue // commands and their output, not links
		}
		line = code.ReplaceAllString(line, "") // code spans: regular expressions, CEL, commands
		if m := issue.FindString(line); m != "" && strings.HasPrefix(filepath.ToSlash(rel), "docs/") {
			t.Errorf("%s:%d cites %q: a reader of the docs cannot follow an issue number; say what it is instead", rel, n+1, m)
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			target := m[1]
			switch {
			case strings.HasPrefix(target, "#"):
				if !anchorsOf(t, path)[target[1:]] {
					t.Errorf("%s:%d links to %s, but the page has no heading whose anchor is that", rel, n+1, target)
				}
				continue
			case strings.HasPrefix(target, "mailto:"):
				continue
			case strings.Contains(target, "://"):
				t.Errorf("%s:%d links outside the repository: %s", rel, n+1, target)
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			dest := filepath.Join(filepath.Dir(path), file)
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s:%d links to %s, which is not in the repository", rel, n+1, target)
				continue
			}
			if fragment != "" && strings.HasSuffix(file, ".md") && !anchorsOf(t, dest)[fragment] {
				t.Errorf("%s:%d links to %s, but %s has no heading whose anchor is #%s", rel, n+1, target, file, fragment)
			}
		}
	}
}

var (
	heading     = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	inlineLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	notInAnchor = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
	anchorCache = map[string]map[string]bool{}
)

// anchorsOf returns the anchors a Markdown renderer gives the page's headings, as GitHub's
// does: the heading's text without its markup, lower-cased, with every character but letters,
// digits, spaces, hyphens and underscores dropped and spaces turned into hyphens; a repeated
// anchor gets -1, -2, ... A link to a heading that was renamed then fails here instead of
// silently landing at the top of the page.
func anchorsOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	if a, ok := anchorCache[path]; ok {
		return a
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		text := inlineLink.ReplaceAllString(m[1], "$1")
		text = strings.NewReplacer("`", "", "*", "").Replace(text)
		slug := strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	anchorCache[path] = anchors
	return anchors
}

func TestAnchorsOf(t *testing.T) {
	page := filepath.Join(t.TempDir(), "page.md")
	content := "# gpupool's architecture\n## The planner's objectives\n## `kubectl gpupool why`, step by step\n" +
		"```sh\n# not a heading\n```\n## Undo and uninstall\n## Undo and uninstall\n### [Linked](other.md) *heading* ##\n"
	if err := os.WriteFile(page, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	got := anchorsOf(t, page)
	for _, want := range []string{"gpupools-architecture", "the-planners-objectives", "kubectl-gpupool-why-step-by-step",
		"undo-and-uninstall", "undo-and-uninstall-1", "linked-heading"} {
		if !got[want] {
			t.Errorf("no anchor #%s in %v", want, got)
		}
	}
	if got["not-a-heading"] || len(got) != 6 {
		t.Errorf("anchors %v, want exactly the six headings outside the code block", got)
	}
}

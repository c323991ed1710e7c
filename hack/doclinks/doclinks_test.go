// Package doclinks holds the repository's documentation to two rules: every link resolves to a
// file in the repository, and none points outside it (air-gapped sites read the docs from the
// checkout; a link outside goes stale without anyone noticing).
package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
			case strings.HasPrefix(target, "#"), strings.HasPrefix(target, "mailto:"):
				continue
			case strings.Contains(target, "://"):
				t.Errorf("%s:%d links outside the repository: %s", rel, n+1, target)
				continue
			}
			file := strings.SplitN(target, "#", 2)[0]
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), file)); err != nil {
				t.Errorf("%s:%d links to %s, which is not in the repository", rel, n+1, target)
			}
		}
	}
}

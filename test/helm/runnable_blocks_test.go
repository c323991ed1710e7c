package helmtest

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

// runnableMarker is the HTML comment, invisible to a reader of the rendered page, that marks
// the fenced block on the next line as one a user runs as written (docs/install.md).
var runnableMarker = regexp.MustCompile(`^<!--\s*runnable:\s*([a-z0-9-]+)\s*-->\s*$`)

// block is a command block a page marks runnable.
type block struct {
	// Name is the marker's name, unique on its page.
	Name string
	// Line is the line of the block's first command, for messages.
	Line int
	// Script is the block's text, without its fences.
	Script string
}

// runnableBlocks returns the blocks a Markdown page marks runnable, in the page's order. A
// marker must stand on the line right before a ```sh or ```bash fence, and every name must be
// unique, so that a marker never silently stops marking anything.
func runnableBlocks(page string) ([]block, error) {
	var (
		blocks  []block
		pending string // a marker's name, waiting for its fence on the next line
		current *block
		body    []string
		seen    = map[string]bool{}
	)
	sc := bufio.NewScanner(strings.NewReader(page))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case current != nil:
			if strings.TrimSpace(line) == "```" {
				current.Script = strings.Join(body, "\n") + "\n"
				blocks = append(blocks, *current)
				current, body = nil, nil
				continue
			}
			body = append(body, line)
		case pending != "":
			if line != "```sh" && line != "```bash" {
				return nil, fmt.Errorf("line %d: the runnable block %q must start with ```sh or ```bash on the line after its marker, not %q", n, pending, line)
			}
			current, pending = &block{Name: pending, Line: n + 1}, ""
		default:
			m := runnableMarker.FindStringSubmatch(line)
			if m == nil {
				if strings.Contains(line, "runnable:") && strings.HasPrefix(strings.TrimSpace(line), "<!--") {
					return nil, fmt.Errorf("line %d: malformed runnable marker %q (want <!-- runnable: name -->)", n, line)
				}
				continue
			}
			if seen[m[1]] {
				return nil, fmt.Errorf("line %d: a second runnable block named %q", n, m[1])
			}
			seen[m[1]], pending = true, m[1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case pending != "":
		return nil, fmt.Errorf("the runnable marker %q is followed by no block", pending)
	case current != nil:
		return nil, fmt.Errorf("the runnable block %q (line %d) is never closed", current.Name, current.Line)
	}
	return blocks, nil
}

// fillPlaceholders replaces the page's <placeholders> (which bash would read as redirections)
// with values, and fails on any it has no value for.
func fillPlaceholders(script string, values map[string]string) (string, error) {
	for k, v := range values {
		script = strings.ReplaceAll(script, "<"+k+">", v)
	}
	if m := regexp.MustCompile(`<[a-z][a-z-]*>`).FindString(script); m != "" {
		return "", fmt.Errorf("placeholder %s has no value in the test", m)
	}
	return script, nil
}

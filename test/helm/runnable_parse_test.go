package helmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunnableBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		want       []block
		wantErr    string
	}{{
		name: "marked blocks in order, unmarked ones left out",
		page: "# t\n```sh\nnot marked\n```\n<!-- runnable: one -->\n```sh\na\nb\n```\ntext\n<!--runnable:two-->\n```bash\nc\n```\n",
		want: []block{{Name: "one", Line: 7, Script: "a\nb\n"}, {Name: "two", Line: 13, Script: "c\n"}},
	}, {
		name:    "a marker before prose",
		page:    "<!-- runnable: one -->\nsome text\n```sh\na\n```\n",
		wantErr: "must start with ```sh",
	}, {
		name:    "a yaml block cannot be run",
		page:    "<!-- runnable: one -->\n```yaml\na: b\n```\n",
		wantErr: "must start with ```sh",
	}, {
		name:    "two blocks of one name",
		page:    "<!-- runnable: one -->\n```sh\na\n```\n<!-- runnable: one -->\n```sh\nb\n```\n",
		wantErr: "a second runnable block",
	}, {
		name:    "a misspelt marker",
		page:    "<!-- runnable: One Two -->\n```sh\na\n```\n",
		wantErr: "malformed runnable marker",
	}, {
		name:    "a marker at the end",
		page:    "text\n<!-- runnable: one -->\n",
		wantErr: "followed by no block",
	}, {
		name:    "an open block",
		page:    "<!-- runnable: one -->\n```sh\na\n",
		wantErr: "never closed",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runnableBlocks(tc.page)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("blocks (-want +got):\n%s", d)
			}
		})
	}
}

func TestFillPlaceholders(t *testing.T) {
	got, err := fillPlaceholders("kubectl label node <node> a=b\necho x 2>&1\n", map[string]string{"node": "n1"})
	if err != nil || got != "kubectl label node n1 a=b\necho x 2>&1\n" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := fillPlaceholders("helm install --set x=<registry>/m\n", nil); err == nil || !strings.Contains(err.Error(), "<registry>") {
		t.Errorf("an unfilled placeholder gave %v", err)
	}
}

// TestInstallPageMarksTheUserSteps keeps the markers on docs/install.md: each step the page
// walks a user through is marked, so TestInstallPageRuns runs it (and a marker that moves off
// its block fails here, without a cluster).
func TestInstallPageMarksTheUserSteps(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := runnableBlocks(string(page))
	if err != nil {
		t.Fatalf("docs/install.md: %v", err)
	}
	var names []string
	for _, b := range blocks {
		names = append(names, b.Name)
	}
	if d := cmp.Diff(installSteps, names); d != "" {
		t.Errorf("runnable blocks of docs/install.md (-want +got):\n%s", d)
	}
}

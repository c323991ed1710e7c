package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// TestKrewManifest renders the krew manifest template as krew-release-bot does and checks what
// krew needs: a version, and for each platform a selector, a URI with its SHA-256, and the
// binary named as kubectl finds plugins.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "hack", "krew", "gpupool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("krew").Funcs(template.FuncMap{
		// As krew-release-bot: the URI's own {{ .TagName }} is filled in, the archive hashed.
		"addURIAndSha": func(uri, tag string) string {
			return "uri: " + strings.ReplaceAll(uri, "{{ .TagName }}", tag) + "\n    sha256: \"" + strings.Repeat("0", 64) + "\""
		},
	}).Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]string{"TagName": "v0.1.0"}); err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			ShortDescription string `json:"shortDescription"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out.Bytes(), &plugin); err != nil {
		t.Fatalf("rendered manifest is not YAML: %v\n%s", err, out.String())
	}
	if plugin.Kind != "Plugin" || plugin.Metadata.Name != "gpupool" || plugin.Spec.Version != "v0.1.0" || plugin.Spec.ShortDescription == "" {
		t.Errorf("manifest header: %+v", plugin)
	}
	var platforms []string
	for _, p := range plugin.Spec.Platforms {
		platforms = append(platforms, p.Selector.MatchLabels["os"]+"/"+p.Selector.MatchLabels["arch"])
		if p.Bin != "kubectl-gpupool" || !strings.Contains(p.URI, "/v0.1.0/kubectl-gpupool_") || len(p.SHA256) != 64 {
			t.Errorf("platform %v: bin %q, uri %q, sha256 %q", p.Selector.MatchLabels, p.Bin, p.URI, p.SHA256)
		}
		if programName(p.Bin) != "kubectl gpupool" {
			t.Errorf("the binary %q would not name itself kubectl gpupool", p.Bin)
		}
	}
	slices.Sort(platforms)
	if want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

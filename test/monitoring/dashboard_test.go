package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpupool/gpupool/internal/metrics"
)

//go:generate go test -run TestDashboardIsGenerated -update .

// TestDashboardIsGenerated: the checked-in dashboards (config/grafana and the chart's copy)
// are what Dashboard() builds; -update rewrites them.
func TestDashboardIsGenerated(t *testing.T) {
	want, err := DashboardJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range DashboardFiles {
		path := filepath.Join(repoRoot(t), f)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from Dashboard() (%v): run go generate in test/monitoring (go test -run TestDashboardIsGenerated -update)", f, err)
		}
	}
}

// grafanaDashboard is the part of Grafana's dashboard JSON that holds queries.
type grafanaDashboard struct {
	Panels []struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboardQueriesUseExportedNames: every query of the checked-in dashboard (panel targets
// and template variables) parses, names only metrics and labels the manager exports, and
// every legend names only labels its query's result carries.
func TestDashboardQueriesUseExportedNames(t *testing.T) {
	catalog := ManagerCatalog()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), DashboardFiles[0]))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", DashboardFiles[0], err)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			have, err := catalog.Check(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			if err := CheckLegend(tg.LegendFormat, have); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
		}
	}
	var variables []string
	for _, v := range d.Templating.List {
		variables = append(variables, v.Name)
		if v.Type != "query" {
			continue
		}
		q, ok := v.Query.(string)
		if m, isMap := v.Query.(map[string]any); isMap {
			q, ok = m["query"].(string)
		}
		if !ok {
			t.Errorf("variable %s: query %v is not a string", v.Name, v.Query)
			continue
		}
		queries++
		if err := catalog.CheckVariableQuery(q); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if !slices.Contains(variables, "datasource") || !slices.Contains(variables, "policy") {
		t.Errorf("variables %v, want datasource and policy", variables)
	}
	if queries < 10 {
		t.Errorf("only %d queries found in %s: did the JSON layout change?", queries, DashboardFiles[0])
	}
}

// TestDashboardShowsEveryMetric: each exported metric appears on some panel, so a new metric
// is a conscious decision to chart it or not.
func TestDashboardShowsEveryMetric(t *testing.T) {
	b, err := DashboardJSON()
	if err != nil {
		t.Fatal(err)
	}
	// Shown only through the alerts: the timeouts are thresholds, not a state to watch.
	notCharted := map[string]bool{metrics.PolicyTimeoutSeconds: true, metrics.FeasibleNodesRatio: true}
	for _, m := range metrics.Exported() {
		if !notCharted[m.Name] && !bytes.Contains(b, []byte(m.Name)) {
			t.Errorf("no panel shows %s", m.Name)
		}
	}
}

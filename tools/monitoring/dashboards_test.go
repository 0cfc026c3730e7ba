package monitoring

import (
	"encoding/json"
	"testing"
)

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// query is one query of a dashboard panel.
type query struct {
	dashboard, panel, expr string
}

// dashboardQueries returns every query of every panel of the repository's
// dashboards.
func dashboardQueries(t testing.TB) []query {
	t.Helper()
	var qs []query
	for name, data := range dashboardFiles(t) {
		var d dashboard
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("dashboard %s: %v", name, err)
		}
		if len(d.Panels) == 0 {
			t.Errorf("dashboard %s has no panel", name)
		}
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("dashboard %s, panel %q has no query", name, p.Title)
			}
			for _, tg := range p.Targets {
				qs = append(qs, query{d.Title, p.Title, tg.Expr})
			}
		}
	}
	return qs
}

func TestDashboardsParse(t *testing.T) {
	if qs := dashboardQueries(t); len(qs) == 0 {
		t.Fatal("no query")
	}
}

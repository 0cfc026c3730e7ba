package monitoring

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string        `json:"title"`
		Datasource datasourceRef `json:"datasource"`
		Targets    []struct {
			Expr       string        `json:"expr"`
			Datasource datasourceRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

// variable is a dashboard variable, as far as the tests read it.
type variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource *datasourceRef `json:"datasource"`
	IncludeAll bool           `json:"includeAll"`
	Multi      bool           `json:"multi"`
	AllValue   string         `json:"allValue"`
}

// query is one query of a dashboard panel.
type query struct {
	dashboard, panel, expr string
}

// datasourceVariable is how panels name the data source: the dashboard's
// variable, so that a Grafana with several Prometheus data sources (the
// Prometheus Operator variant) picks one.
const datasourceVariable = "${datasource}"

// nodeVariable is the node variable's query: the nodes of the KOS
// components' targets.
const nodeVariable = `label_values(up{job=~"kos-.*"}, node)`

// jobSelector matches a query's selection of a KOS job, which must be
// followed by the node variable's.
var jobSelector = regexp.MustCompile(`job="kos-[a-z-]+"(, node=~"\$node")?`)

func parseDashboards(t testing.TB) map[string]dashboard {
	t.Helper()
	out := map[string]dashboard{}
	for name, data := range dashboardFiles(t) {
		var d dashboard
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("dashboard %s: %v", name, err)
		}
		out[name] = d
	}
	return out
}

// dashboardQueries returns every query of every panel of the repository's
// dashboards.
func dashboardQueries(t testing.TB) []query {
	t.Helper()
	var qs []query
	for name, d := range parseDashboards(t) {
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

// withNode returns expr with the node variable set to a regular
// expression, as Grafana interpolates it.
func withNode(expr, nodeRegexp string) string {
	return strings.ReplaceAll(expr, "$node", nodeRegexp)
}

func TestDashboardsParse(t *testing.T) {
	if qs := dashboardQueries(t); len(qs) == 0 {
		t.Fatal("no query")
	}
}

// TestDashboardVariables checks that every dashboard has a data source
// variable of type prometheus that every panel and query uses, and a node
// variable (all or several nodes) that every query of a KOS job filters on.
func TestDashboardVariables(t *testing.T) {
	for name, d := range parseDashboards(t) {
		vars := map[string]variable{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v
		}
		if ds := vars["datasource"]; ds.Type != "datasource" || ds.Query != "prometheus" {
			t.Errorf("%s: variable datasource is %+v, want type datasource, query prometheus", name, ds)
		}
		node := vars["node"]
		q, _ := node.Query.(map[string]any)
		if node.Type != "query" || q["query"] != nodeVariable || !node.IncludeAll || !node.Multi || node.AllValue != ".*" ||
			node.Datasource == nil || node.Datasource.UID != datasourceVariable {
			t.Errorf("%s: variable node is %+v, want a query %s of ${datasource}, multi, all as .*", name, node, nodeVariable)
		}
		for _, p := range d.Panels {
			if p.Datasource.UID != datasourceVariable {
				t.Errorf("%s, panel %q: data source %+v, want %s", name, p.Title, p.Datasource, datasourceVariable)
			}
			for _, tg := range p.Targets {
				if tg.Datasource.UID != datasourceVariable {
					t.Errorf("%s, panel %q: a query's data source is %+v, want %s", name, p.Title, tg.Datasource, datasourceVariable)
				}
				for _, m := range jobSelector.FindAllStringSubmatch(tg.Expr, -1) {
					if m[1] == "" {
						t.Errorf("%s, panel %q: %s selects a job without node=~\"$node\"", name, p.Title, tg.Expr)
					}
				}
				if !strings.Contains(tg.Expr, `node=~"$node"`) {
					t.Errorf("%s, panel %q: %s does not filter on the node variable", name, p.Title, tg.Expr)
				}
			}
		}
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// promAPI reads Prometheus's HTTP API (/api/v1) at base, as much of it as
// the monitoring test needs.
type promAPI struct{ base string }

// promTarget is an active target of /api/v1/targets.
type promTarget struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// promRule is a rule of /api/v1/rules: an alerting rule when Type is
// "alerting".
type promRule struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

// promAlert is an active alert of /api/v1/alerts; State is pending or
// firing.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// promSample is one series of an instant query's vector.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// get sends GET path?params and decodes the answer's data into out.
func (p promAPI) get(ctx context.Context, path string, params url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if answer.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, answer.Error)
	}
	if err := json.Unmarshal(answer.Data, out); err != nil {
		return fmt.Errorf("GET %s: reading %s: %w", path, answer.Data, err)
	}
	return nil
}

// version returns the version Prometheus says it is.
func (p promAPI) version(ctx context.Context) (string, error) {
	var info struct {
		Version string `json:"version"`
	}
	err := p.get(ctx, "/api/v1/status/buildinfo", nil, &info)
	return info.Version, err
}

// flags returns the command-line flags Prometheus runs with, by name
// without the dashes (storage.tsdb.retention.time, say).
func (p promAPI) flags(ctx context.Context) (map[string]string, error) {
	var flags map[string]string
	err := p.get(ctx, "/api/v1/status/flags", nil, &flags)
	return flags, err
}

// targets returns the active targets.
func (p promAPI) targets(ctx context.Context) ([]promTarget, error) {
	var data struct {
		Active []promTarget `json:"activeTargets"`
	}
	err := p.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data)
	return data.Active, err
}

// rules returns the rules of every group.
func (p promAPI) rules(ctx context.Context) ([]promRule, error) {
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var rules []promRule
	for _, g := range data.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules, nil
}

// alerts returns the active alerts.
func (p promAPI) alerts(ctx context.Context) ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// query runs an instant query of a vector expression.
func (p promAPI) query(ctx context.Context, expr string) ([]promSample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s gave a %s, want a vector", expr, data.ResultType)
	}
	var samples []promSample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", expr, r.Value[1], err)
		}
		samples = append(samples, promSample{Metric: r.Metric, Value: v})
	}
	return samples, nil
}

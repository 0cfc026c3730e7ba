package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// etcdHealthy asks etcd's /health endpoint, which every etcd since 3.3
// serves on its client URL.
func etcdHealthy(ctx context.Context, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return fmt.Errorf("building the health request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking etcd's health: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fmt.Errorf("reading etcd's health: %w", err)
	}
	var health struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &health); err != nil || resp.StatusCode != http.StatusOK || health.Health != "true" {
		return fmt.Errorf("etcd not healthy: %s %s", resp.Status, body)
	}
	return nil
}

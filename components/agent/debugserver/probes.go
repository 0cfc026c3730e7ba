package debugserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/agent/probe"
)

// handleProbes serves the probe paths of p on mux: GET says they are
// served, POST starts a probe, DELETE removes one, POST of the check path
// runs a check, in one of the slots of withSlot.
func handleProbes(mux *http.ServeMux, p Prober, withSlot func(http.ResponseWriter, *http.Request, func(context.Context))) {
	mux.HandleFunc("GET "+api.PathProbes, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "probes are served")
	})
	mux.HandleFunc("POST "+api.PathProbes, func(w http.ResponseWriter, r *http.Request) {
		var req api.ProbeRequest
		if err := decode(http.MaxBytesReader(w, r.Body, maxTraceRequest), &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := probe.ValidateStart(req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		withSlot(w, r, func(ctx context.Context) {
			if err := p.StartProbe(ctx, req); err != nil {
				http.Error(w, err.Error(), probeErrorCode(err))
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
	})
	mux.HandleFunc("DELETE "+api.PathProbes, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := api.ProbeRequest{Namespace: q.Get("namespace"), Name: q.Get("name")}
		if err := probe.ValidateStart(req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		withSlot(w, r, func(ctx context.Context) {
			if err := p.StopProbe(ctx, req); err != nil {
				http.Error(w, err.Error(), probeErrorCode(err))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	})
	mux.HandleFunc("POST "+api.PathProbeCheck, func(w http.ResponseWriter, r *http.Request) {
		var req api.ProbeCheckRequest
		if err := decode(http.MaxBytesReader(w, r.Body, maxTraceRequest), &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := probe.ValidateCheck(req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		withSlot(w, r, func(ctx context.Context) {
			res, err := p.CheckProbe(ctx, req)
			if err != nil {
				http.Error(w, err.Error(), probeErrorCode(err))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(res); err != nil {
				klog.FromContext(ctx).V(2).Info("Writing a probe's result failed", "err", err)
			}
		})
	})
}

// decode decodes one JSON request that has no unknown fields.
func decode(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding the request: %w", err)
	}
	return nil
}

// probeErrorCode returns the HTTP status of a Prober's error.
func probeErrorCode(err error) int {
	switch {
	case errors.Is(err, ErrNotLocal), errors.Is(err, probe.ErrNoProbe):
		return http.StatusNotFound
	case errors.Is(err, ErrNotProbeable):
		return http.StatusForbidden
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrNoAddress):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

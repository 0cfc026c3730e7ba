package ovs

// This file talks to ovsdb-server itself, over its Unix socket, with the
// OVSDB protocol (RFC 7047: JSON-RPC): one kept connection on which the plug
// adds ports and waits, in ovsdb-server, for their OpenFlow numbers, instead
// of running ovs-vsctl twice per batch. go-openvswitch's ovsdb package
// answers select alone and drops the errors of a transaction's operations,
// which the plug must see, so the few requests it needs are written here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// vswitchDB is the database of Open vSwitch's configuration.
const vswitchDB = "Open_vSwitch"

// ovsdbConn is a kept connection to ovsdb-server that sends one request at
// a time. It dials on first use and again after any error, so a restarted
// ovsdb-server costs one failed request.
type ovsdbConn struct {
	socket  string
	timeout time.Duration

	// mu is held for a whole request and its answer.
	mu   sync.Mutex
	conn net.Conn // nil until dialled, and after any error
	dec  *json.Decoder
	id   uint64
}

// ovsdbMessage is a JSON-RPC message from ovsdb-server: a request or
// notification (Method set) or a response (Result or Error set).
type ovsdbMessage struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	ID     any             `json:"id"`
}

// ovsdbRequest is a JSON-RPC request to ovsdb-server.
type ovsdbRequest struct {
	Method string `json:"method"`
	Params []any  `json:"params"`
	ID     uint64 `json:"id"`
}

// ovsdbResponse is a JSON-RPC response to ovsdb-server's echo.
type ovsdbResponse struct {
	Result json.RawMessage `json:"result"`
	Error  any             `json:"error"`
	ID     any             `json:"id"`
}

// ovsdbOpError says why a transaction failed: the error of operation Op
// (counted from 0), or, when Op is the number of operations, the commit's.
type ovsdbOpError struct {
	Op, Ops      int
	Why, Details string
}

func (e *ovsdbOpError) Error() string {
	if e.Op >= e.Ops {
		return fmt.Sprintf("committing: %s: %s", e.Why, e.Details)
	}
	return fmt.Sprintf("operation %d of %d: %s: %s", e.Op+1, e.Ops, e.Why, e.Details)
}

// ovsdbResult is the result of one operation of a transaction, or the
// error that ended it.
type ovsdbResult struct {
	Error   string                       `json:"error"`
	Details string                       `json:"details"`
	Count   int                          `json:"count"`
	Rows    []map[string]json.RawMessage `json:"rows"`
}

// transact runs operations in one transaction of the Open_vSwitch
// database and returns their results, one per operation. It fails when
// the transaction did: an operation's error, or the commit's.
func (c *ovsdbConn) transact(ctx context.Context, ops ...any) ([]ovsdbResult, error) {
	raw, err := c.call(ctx, "transact", append([]any{vswitchDB}, ops...))
	if err != nil {
		return nil, err
	}
	var results []*ovsdbResult
	if err := json.Unmarshal(raw, &results); err != nil {
		return nil, fmt.Errorf("decoding a transaction's results: %w", err)
	}
	// An operation that fails ends the transaction, and its result says
	// why; a commit that fails adds a result past the operations'.
	for i, r := range results {
		if r != nil && r.Error != "" {
			return nil, &ovsdbOpError{Op: i, Ops: len(ops), Why: r.Error, Details: r.Details}
		}
	}
	if len(results) < len(ops) {
		return nil, fmt.Errorf("%d results for %d operations", len(results), len(ops))
	}
	out := make([]ovsdbResult, len(ops))
	for i := range ops {
		if results[i] != nil {
			out[i] = *results[i]
		}
	}
	return out, nil
}

// call sends one request and returns its result. It answers the server's
// echo requests meanwhile. Any error closes the connection: what it has
// in flight is unknown.
func (c *ovsdbConn) call(ctx context.Context, method string, params []any) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, c.timeout)
		conn, err := d.DialContext(dctx, "unix", c.socket)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("connecting to ovsdb-server: %w", err)
		}
		c.conn, c.dec = conn, json.NewDecoder(conn)
	}
	result, err := c.exchange(ctx, method, params)
	if err != nil {
		c.conn.Close()
		c.conn, c.dec = nil, nil
	}
	return result, err
}

// exchange is call on a connection; the caller holds mu.
func (c *ovsdbConn) exchange(ctx context.Context, method string, params []any) (json.RawMessage, error) {
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("talking to ovsdb-server: %w", err)
	}
	// A cancelled caller stops waiting at once.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.id++
	id := c.id
	enc := json.NewEncoder(c.conn)
	if err := enc.Encode(ovsdbRequest{Method: method, Params: params, ID: id}); err != nil {
		return nil, c.failed(ctx, fmt.Errorf("sending %s to ovsdb-server: %w", method, err))
	}
	for {
		var m ovsdbMessage
		if err := c.dec.Decode(&m); err != nil {
			return nil, c.failed(ctx, fmt.Errorf("reading ovsdb-server's answer to %s: %w", method, err))
		}
		if m.Method == "echo" {
			echo := m.Params
			if len(echo) == 0 {
				echo = json.RawMessage("[]")
			}
			if err := enc.Encode(ovsdbResponse{Result: echo, ID: m.ID}); err != nil {
				return nil, c.failed(ctx, fmt.Errorf("answering ovsdb-server's echo: %w", err))
			}
			continue
		}
		if n, ok := m.ID.(float64); !ok || uint64(n) != id {
			// A notification, or the answer to a request that an
			// earlier error abandoned: not ours.
			continue
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, fmt.Errorf("ovsdb-server refused %s: %s", method, m.Error)
		}
		return m.Result, nil
	}
}

// failed returns err, or the caller's context's error when the context
// ended the exchange.
func (c *ovsdbConn) failed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w (%w)", ctxErr, err)
	}
	return err
}

// close closes the connection, if there is one.
func (c *ovsdbConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.dec = nil, nil
	}
}

// errPortsExist says that addSystemPortsDirect found a port or interface
// of one of the names on the switch already; ovs-vsctl's --may-exist
// handles that case.
var errPortsExist = errors.New("a port of that name exists")

// addSystemPortsDirect adds existing interfaces as new ports of a bridge,
// all in one transaction, and waits until ovs-vswitchd has given each its
// OpenFlow number (or -1, when it could not open the interface). It
// returns their Interface rows: name, type, ofport, error and external
// IDs. It adds nothing when any of the names is taken (errPortsExist,
// among other errors), and when the bridge does not exist.
func (c *ovsClient) addSystemPortsDirect(ctx context.Context, bridge string, ports []systemPort) ([]interfaceRow, error) {
	ops := make([]any, 0, 2*len(ports)+1)
	portRefs := make([]any, 0, len(ports))
	for i, p := range ports {
		ids := make([][2]string, 0, len(p.externalIDs))
		for k, v := range p.externalIDs {
			ids = append(ids, [2]string{k, v})
		}
		ifc, port := fmt.Sprintf("i%d", i), fmt.Sprintf("p%d", i)
		ops = append(ops,
			map[string]any{"op": "insert", "table": "Interface", "uuid-name": ifc, "row": map[string]any{
				"name": p.name, "type": "system", "external_ids": []any{"map", ids},
			}},
			map[string]any{"op": "insert", "table": "Port", "uuid-name": port, "row": map[string]any{
				"name": p.name, "interfaces": []any{"named-uuid", ifc},
			}})
		portRefs = append(portRefs, []any{"named-uuid", port})
	}
	ops = append(ops, map[string]any{
		"op": "mutate", "table": "Bridge", "where": []any{[]any{"name", "==", bridge}},
		"mutations": []any{[]any{"ports", "insert", []any{"set", portRefs}}},
	})
	// The names are unique in the Port and Interface tables: a taken one
	// fails the commit. Asking first costs nothing more in the same
	// transaction, and says so plainly.
	checks := make([]any, 0, 2*len(ports))
	for _, p := range ports {
		for _, table := range []string{"Port", "Interface"} {
			checks = append(checks, map[string]any{
				"op": "wait", "timeout": 0, "table": table, "where": []any{[]any{"name", "==", p.name}},
				"columns": []string{"name"}, "until": "==", "rows": []any{},
			})
		}
	}
	results, err := c.db.transact(ctx, append(checks, ops...)...)
	if opErr := (*ovsdbOpError)(nil); errors.As(err, &opErr) && opErr.Op < len(checks) && opErr.Why == "timed out" {
		return nil, fmt.Errorf("adding %d ports to bridge %s: %w", len(ports), bridge, errPortsExist)
	}
	if err != nil {
		return nil, fmt.Errorf("adding %d ports to bridge %s: %w", len(ports), bridge, err)
	}
	if n := results[len(results)-1].Count; n != 1 {
		return nil, fmt.Errorf("adding %d ports to bridge %s: %d bridges of that name", len(ports), bridge, n)
	}
	return c.awaitOFPorts(ctx, ports)
}

// awaitOFPorts waits, in ovsdb-server, until ovs-vswitchd has numbered
// the named ports' interfaces, and reads their rows in the same
// transaction.
func (c *ovsClient) awaitOFPorts(ctx context.Context, ports []systemPort) ([]interfaceRow, error) {
	wait := c.timeout * 3 / 4
	if d, ok := ctx.Deadline(); ok && time.Until(d)*3/4 < wait {
		wait = time.Until(d) * 3 / 4
	}
	ops := make([]any, 0, 2*len(ports))
	for _, p := range ports {
		where := []any{[]any{"name", "==", p.name}}
		ops = append(ops,
			map[string]any{
				"op": "wait", "timeout": wait.Milliseconds(), "table": "Interface", "where": where,
				"columns": []string{"ofport"}, "until": "!=", "rows": []any{map[string]any{"ofport": []any{"set", []any{}}}},
			},
			map[string]any{
				"op": "select", "table": "Interface", "where": where,
				"columns": []string{"name", "type", "ofport", "error", "external_ids"},
			})
	}
	results, err := c.db.transact(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("waiting for the OpenFlow numbers of %d ports: %w", len(ports), err)
	}
	rows := make([]interfaceRow, 0, len(ports))
	for i := 1; i < len(results); i += 2 {
		for _, r := range results[i].Rows {
			row, err := interfaceRowOf(r)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// interfaceRowOf decodes a row of the Interface table that a select
// returned.
func interfaceRowOf(r map[string]json.RawMessage) (interfaceRow, error) {
	var row interfaceRow
	var errs []error
	for col, v := range r {
		var err error
		switch col {
		case "name":
			row.Name, err = ovsdbString(v)
		case "type":
			row.Type, err = ovsdbString(v)
		case "mac":
			row.MAC, err = ovsdbString(v)
		case "error":
			row.Error, err = ovsdbString(v)
		case "ofport":
			row.OFPort, err = ovsdbInt(v)
		case "mtu_request":
			row.MTURequest, err = ovsdbInt(v)
		case "external_ids":
			row.ExternalIDs, err = ovsdbMap(v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("column %s: %w", col, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return interfaceRow{}, fmt.Errorf("decoding a row of the Interface table: %w", err)
	}
	return row, nil
}

// interfacesDirect reads the Interface rows of those of names that exist,
// in one transaction: what ovs-vsctl --if-exists list reads, without a
// process, and without the copy of whole tables that ovs-vsctl fetches
// before it answers. A pod's DEL reads its port this way.
func (c *ovsClient) interfacesDirect(ctx context.Context, names []string) ([]interfaceRow, error) {
	if len(names) == 0 {
		return nil, nil
	}
	ops := make([]any, 0, len(names))
	for _, n := range names {
		ops = append(ops, map[string]any{
			"op": "select", "table": "Interface", "where": []any{[]any{"name", "==", n}},
			"columns": strings.Split(interfaceColumns, ","),
		})
	}
	results, err := c.db.transact(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("reading %d interfaces: %w", len(names), err)
	}
	var rows []interfaceRow
	for _, r := range results {
		for _, raw := range r.Rows {
			row, err := interfaceRowOf(raw)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// deletePortsDirect deletes the ports of names that are on bridge (a port
// of one of the names on another bridge stays), and
// waits until ovs-vswitchd has applied the change, as ovs-vsctl del-port
// does: a port of the same name plugged next must meet a switch that has
// let go of the old one. It finds the ports in one transaction, takes them
// off the bridge in a second (OVSDB then drops the rows no bridge refers
// to), and reads ovs-vswitchd's progress until it has caught up.
func (c *ovsClient) deletePortsDirect(ctx context.Context, bridge string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	finds := make([]any, 0, len(names))
	for _, n := range names {
		finds = append(finds, map[string]any{
			"op": "select", "table": "Port", "where": []any{[]any{"name", "==", n}}, "columns": []string{"_uuid"},
		})
	}
	found, err := c.db.transact(ctx, finds...)
	if err != nil {
		return fmt.Errorf("finding %d ports: %w", len(names), err)
	}
	var uuids []any
	for _, r := range found {
		for _, row := range r.Rows {
			var uuid [2]string
			if err := json.Unmarshal(row["_uuid"], &uuid); err != nil || uuid[0] != "uuid" {
				return fmt.Errorf("finding %d ports: a row's _uuid is %s", len(names), row["_uuid"])
			}
			uuids = append(uuids, []any{"uuid", uuid[1]})
		}
	}
	if len(uuids) == 0 {
		return nil
	}
	results, err := c.db.transact(ctx,
		map[string]any{
			"op": "mutate", "table": "Bridge", "where": []any{[]any{"name", "==", bridge}},
			"mutations": []any{[]any{"ports", "delete", []any{"set", uuids}}},
		},
		// ovs-vswitchd sets cur_cfg to next_cfg once it has applied
		// the database as of that value.
		map[string]any{"op": "mutate", "table": "Open_vSwitch", "where": []any{}, "mutations": []any{[]any{"next_cfg", "+=", 1}}},
		map[string]any{"op": "select", "table": "Open_vSwitch", "where": []any{}, "columns": []string{"next_cfg"}},
	)
	if err != nil {
		return fmt.Errorf("deleting %d ports from bridge %s: %w", len(uuids), bridge, err)
	}
	if n := results[0].Count; n != 1 {
		return fmt.Errorf("deleting %d ports from bridge %s: %d bridges of that name", len(uuids), bridge, n)
	}
	if len(results[2].Rows) != 1 {
		return fmt.Errorf("deleting %d ports from bridge %s: %d rows in the Open_vSwitch table", len(uuids), bridge, len(results[2].Rows))
	}
	next, err := ovsdbInt(results[2].Rows[0]["next_cfg"])
	if err != nil {
		return fmt.Errorf("reading next_cfg: %w", err)
	}
	return c.awaitConfig(ctx, next)
}

// awaitConfig waits until ovs-vswitchd has applied the database as of
// next_cfg value next. OVSDB's wait operation only compares for equality,
// and another client may move next_cfg on before ovs-vswitchd catches up,
// so this reads cur_cfg until it is next or later, a few milliseconds
// apart, leaving the connection free between reads.
func (c *ovsClient) awaitConfig(ctx context.Context, next int) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		results, err := c.db.transact(ctx, map[string]any{"op": "select", "table": "Open_vSwitch", "where": []any{}, "columns": []string{"cur_cfg"}})
		if err != nil {
			return fmt.Errorf("waiting for ovs-vswitchd to apply configuration %d: %w", next, err)
		}
		if len(results[0].Rows) == 1 {
			if cur, err := ovsdbInt(results[0].Rows[0]["cur_cfg"]); err == nil && cur >= next {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for ovs-vswitchd to apply configuration %d: %w", next, ctx.Err())
		case <-time.After(pause):
		}
	}
}

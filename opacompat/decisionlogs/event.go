package decisionlogs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp"
)

// appendEvent appends r as an OPA decision event (the document OPA's
// EventV1 encodes to). labels is the encoded labels object; cfg gives the
// bundle's name and the gRPC decision's path or query.
func appendEvent(b []byte, r *pdp.DecisionRecord, labels []byte, cfg *Config) []byte {
	bundle := cfg.Bundle
	b = append(b, `{"decision_id":`...)
	b = jsonw.String(b, r.ID)
	b = append(b, `,"labels":`...)
	b = append(b, labels...)
	if bundle != "" {
		b = append(b, `,"bundles":{`...)
		b = jsonw.String(b, bundle)
		b = append(b, ':', '{')
		if r.Revision != "" {
			b = append(b, `"revision":`...)
			b = jsonw.String(b, r.Revision)
		}
		b = append(b, '}', '}')
	}
	path, query := r.Path, ""
	if r.Interface == pdp.IfaceGRPC && (cfg.GRPCPath != "" || cfg.GRPCQuery != "") {
		path, query = cfg.GRPCPath, cfg.GRPCQuery
	}
	// As OPA's EventV1, an empty path or query is left out.
	if path != "" {
		b = append(b, `,"path":`...)
		b = jsonw.String(b, path)
	}
	if query != "" {
		b = append(b, `,"query":`...)
		b = jsonw.String(b, query)
	}
	if len(r.Input) > 0 {
		b = append(b, `,"input":`...)
		b = append(b, r.Input...)
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	if r.ErrorCode != "" {
		b = append(b, `,"error":{"code":`...)
		b = jsonw.String(b, r.ErrorCode)
		b = append(b, `,"message":`...)
		b = jsonw.String(b, r.ErrorMessage)
		b = append(b, '}')
	}
	b = append(b, `,"timestamp":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","metrics":{"timer_rego_query_eval_ns":`...)
	b = strconv.AppendInt(b, r.EvalNanos, 10)
	b = append(b, `,"timer_server_handler_ns":`...)
	b = strconv.AppendInt(b, r.HandlerNanos, 10)
	return append(b, '}', '}')
}

// appendLabels encodes labels as a JSON object, keys sorted.
func appendLabels(b []byte, labels map[string]string) []byte {
	return jsonw.Object(b, labels, jsonw.String)
}

// errMalformedMask reports a mask rule result that cannot be read.
var errMalformedMask = errors.New("malformed mask rule result")

// maskOp is one operation of a mask rule's result.
type maskOp struct {
	upsert bool
	parts  []string // after the leading "input" or "result"
	root   string   // "input" or "result"
	value  any
	name   string // the path as the erased or masked lists show it
}

// parseMask reads a mask rule's result, as OPA does: an array whose
// entries are JSON pointers ("/input/password": erase) or objects
// {"op": "remove"|"upsert", "path": pointer, "value": v}. Pointers must
// start with /input or /result.
func parseMask(raw []byte) ([]maskOp, error) {
	var entries []any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("%w: want an array: %w", errMalformedMask, err)
	}
	ops := make([]maskOp, 0, len(entries))
	for i, e := range entries {
		var op maskOp
		var path string
		switch e := e.(type) {
		case string:
			path = e
		case map[string]any:
			for k := range e {
				if k != "op" && k != "path" && k != "value" {
					return nil, fmt.Errorf("%w: entry %d: unknown member %q", errMalformedMask, i, k)
				}
			}
			p, ok := e["path"].(string)
			if !ok {
				return nil, fmt.Errorf("%w: entry %d: path must be a string", errMalformedMask, i)
			}
			path = p
			switch e["op"] {
			case nil, "remove":
			case "upsert":
				op.upsert = true
				op.value = e["value"]
			default:
				return nil, fmt.Errorf("%w: entry %d: op %v is neither remove nor upsert", errMalformedMask, i, e["op"])
			}
		default:
			return nil, fmt.Errorf("%w: entry %d is a %T, not a pointer or an object", errMalformedMask, i, e)
		}
		if !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("%w: entry %d: %q does not start with a slash", errMalformedMask, i, path)
		}
		parts := strings.Split(path[1:], "/")
		if parts[0] != "input" && parts[0] != "result" {
			return nil, fmt.Errorf("%w: entry %d: %q is neither under /input nor under /result", errMalformedMask, i, path)
		}
		escaped := make([]string, len(parts))
		for j, p := range parts {
			u, err := url.PathUnescape(p)
			if err != nil {
				return nil, fmt.Errorf("%w: entry %d: %q: %w", errMalformedMask, i, path, err)
			}
			parts[j] = u
			escaped[j] = url.PathEscape(u)
		}
		op.root, op.parts, op.name = parts[0], parts[1:], "/"+strings.Join(escaped, "/")
		ops = append(ops, op)
	}
	return ops, nil
}

// applyMask applies ops to the event ev (an encoded event) and returns
// the masked event, with its erased and masked lists. A pointer that
// leads nowhere is skipped and not listed, as OPA skips it.
func applyMask(ev []byte, ops []maskOp) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(ev))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding the event: %w", err)
	}
	var erased, masked []string
	for _, op := range ops {
		v, present := doc[op.root]
		switch {
		case !present:
			continue
		case len(op.parts) == 0 && op.upsert:
			doc[op.root] = op.value
		case len(op.parts) == 0:
			delete(doc, op.root)
		case op.upsert:
			if !upsert(v, op.parts, op.value) {
				continue
			}
		default:
			nv, ok := remove(v, op.parts)
			if !ok {
				continue
			}
			doc[op.root] = nv
		}
		if op.upsert {
			masked = append(masked, op.name)
		} else {
			erased = append(erased, op.name)
		}
	}
	if len(erased) > 0 {
		doc["erased"] = erased
	}
	if len(masked) > 0 {
		doc["masked"] = masked
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the masked event: %w", err)
	}
	return out, nil
}

// remove deletes the member at parts below node and returns the node
// (an array shrinks, so its parent must hold the new one).
func remove(node any, parts []string) (any, bool) {
	key := parts[0]
	switch n := node.(type) {
	case map[string]any:
		child, ok := n[key]
		if !ok {
			return node, false
		}
		if len(parts) == 1 {
			delete(n, key)
			return n, true
		}
		nc, ok := remove(child, parts[1:])
		if ok {
			n[key] = nc
		}
		return n, ok
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(n) {
			return node, false
		}
		if len(parts) == 1 {
			return slices.Delete(n, i, i+1), true
		}
		nc, ok := remove(n[i], parts[1:])
		if ok {
			n[i] = nc
		}
		return n, ok
	}
	return node, false
}

// upsert sets the member at parts below node to value, making the
// objects on the way as OPA does.
func upsert(node any, parts []string, value any) bool {
	for i, key := range parts {
		last := i == len(parts)-1
		switch n := node.(type) {
		case map[string]any:
			if last {
				n[key] = value
				return true
			}
			child, ok := n[key]
			if !ok {
				child = map[string]any{}
				n[key] = child
			}
			node = child
		case []any:
			idx, err := strconv.Atoi(key)
			if err != nil || idx < 0 || idx >= len(n) {
				return false
			}
			if last {
				n[idx] = value
				return true
			}
			node = n[idx]
		default:
			return false
		}
	}
	return false
}

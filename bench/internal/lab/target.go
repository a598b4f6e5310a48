package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Interfaces a target can be reached on.
const (
	// InterfaceGRPC is Envoy's ext_authz gRPC Check with Envoy-shaped
	// CheckRequests (method and path of the default route rules, the
	// x-user header, a fresh x-request-id per request). The server must
	// trust x-user (nexus serve --trusted-subject-header x-user): the
	// load generator stands for the proxy that verified the subject.
	InterfaceGRPC = "grpc"
	// InterfaceAllowed is the Permit-compatible POST /allowed.
	InterfaceAllowed = "allowed"
	// InterfaceAuthZEN is AuthZEN's POST /access/v1/evaluation.
	InterfaceAuthZEN = "authzen"
	// InterfaceOPA is OPA's POST /v1/data/nexusbench/allow (the OPA peer).
	InterfaceOPA = "opa"
	// InterfaceOpenFGA is OpenFGA's POST /stores/{id}/check (the OpenFGA
	// peer; TargetConfig.Store and Model name the store and model).
	InterfaceOpenFGA = "openfga"
	// InterfaceGateway is the check's own request (method, path, the
	// x-user header) sent through a proxy: 2xx is an allow, 403 a deny.
	InterfaceGateway = "gateway"
)

// Interfaces lists every interface.
var Interfaces = []string{InterfaceGRPC, InterfaceAllowed, InterfaceAuthZEN}

// metricInterface is the server's "interface" label for a bench interface.
func metricInterface(iface string) string {
	switch iface {
	case InterfaceAllowed:
		return "permit"
	case InterfaceGateway:
		return "http"
	}
	return iface
}

// TargetConfig configures a Target.
type TargetConfig struct {
	// Interface is grpc, allowed or authzen.
	Interface string
	// Addr is the host:port of the server's gRPC listener (grpc) or HTTP
	// listener (allowed, authzen).
	Addr string
	// Conns is the number of connections (gRPC) or the idle connection
	// pool (HTTP); zero means 1 for gRPC (on 2 cores one HTTP/2
	// connection batched better and kept a lower tail than 2, 4 or 16)
	// and 256 for HTTP.
	Conns int
	// Timeout bounds one request; zero means 5 s.
	Timeout time.Duration
	// Client is the gRPC client: ClientLean (the default) or ClientGRPCGo.
	Client string
	// APIKey is sent as "Authorization: Bearer APIKey" to the HTTP
	// listener's application endpoints; "" sends none.
	APIKey string
	// Store and Model are the OpenFGA store and authorization model IDs
	// (InterfaceOpenFGA).
	Store, Model string
}

// gRPC clients of the load generator.
const (
	// ClientLean is the generator's own HTTP/2 client (h2conn): a
	// fraction of grpc-go's CPU per call.
	ClientLean = "lean"
	// ClientGRPCGo is grpc-go's client, for comparison.
	ClientGRPCGo = "grpc-go"
)

// Validate fills defaults and rejects nonsense.
func (c *TargetConfig) Validate() error {
	switch c.Interface {
	case InterfaceGRPC, InterfaceAllowed, InterfaceAuthZEN, InterfaceOPA, InterfaceGateway:
	case InterfaceOpenFGA:
		if c.Store == "" || c.Model == "" {
			return fmt.Errorf("%w: the openfga interface needs a store and a model", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: interface %q: want grpc, allowed, authzen, opa, openfga or gateway", ErrConfig, c.Interface)
	}
	if c.Addr == "" {
		return fmt.Errorf("%w: a target address is required", ErrConfig)
	}
	switch c.Client {
	case "":
		c.Client = ClientLean
	case ClientLean, ClientGRPCGo:
	default:
		return fmt.Errorf("%w: gRPC client %q: want lean or grpc-go", ErrConfig, c.Client)
	}
	if c.Conns < 0 || c.Timeout < 0 {
		return fmt.Errorf("%w: negative connections or timeout", ErrConfig)
	}
	if c.Conns == 0 {
		c.Conns = 1
		if c.Interface != InterfaceGRPC {
			c.Conns = 256
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	return nil
}

// Target sends checks to one server over one interface. Requests are
// built once (Prepare); sending one is a write of ready bytes and a
// partial read of the answer, with no reflection or JSON encoding.
type Target struct {
	cfg   TargetConfig
	conns []*grpc.ClientConn
	h2    []*h2conn
	next  atomic.Uint64
	http  *http.Client
	url   string
	auth  string // the Authorization header, if any
	seq   atomic.Uint64
	// idPrefix makes request IDs unique across runs and processes.
	idPrefix string
}

// NewTarget connects to the server (gRPC connections are made lazily by
// gRPC; the first request pays for them).
func NewTarget(cfg TargetConfig) (*Target, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Target{cfg: cfg, idPrefix: "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"}
	switch cfg.Interface {
	case InterfaceGRPC:
		for range cfg.Conns {
			if cfg.Client == ClientLean {
				ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
				c, err := dialH2(ctx, cfg.Addr, checkMethod)
				cancel()
				if err != nil {
					_ = t.Close()
					return nil, err
				}
				t.h2 = append(t.h2, c)
				continue
			}
			c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				_ = t.Close()
				return nil, fmt.Errorf("bench: %w", err)
			}
			t.conns = append(t.conns, c)
		}
	default:
		tr := &http.Transport{
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        cfg.Conns,
			MaxIdleConnsPerHost: cfg.Conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
		t.http = &http.Client{Transport: tr, Timeout: cfg.Timeout}
		path := "/allowed"
		switch cfg.Interface {
		case InterfaceAuthZEN:
			path = "/access/v1/evaluation"
		case InterfaceOPA:
			path = "/v1/data/nexusbench/allow"
		case InterfaceOpenFGA:
			path = "/stores/" + cfg.Store + "/check"
		case InterfaceGateway:
			path = ""
		}
		t.url = "http://" + cfg.Addr + path
		if cfg.APIKey != "" {
			t.auth = "Bearer " + cfg.APIKey
		}
	}
	return t, nil
}

// Interface returns the target's interface.
func (t *Target) Interface() string { return t.cfg.Interface }

// Close closes the connections.
func (t *Target) Close() error {
	var errs []error
	for _, c := range t.conns {
		errs = append(errs, c.Close())
	}
	for _, c := range t.h2 {
		errs = append(errs, c.close())
	}
	if t.http != nil {
		t.http.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// Warm connects every gRPC connection and sends a few requests over each
// connection, so that a measured window does not pay for connection setup.
func (t *Target) Warm(ctx context.Context, reqs []Request) error {
	if len(reqs) == 0 {
		return nil
	}
	n := 4 * (len(t.conns) + len(t.h2))
	if n == 0 {
		n = 16
	}
	for i := range n {
		if o := t.Send(ctx, &reqs[i%len(reqs)]); o.Err != nil {
			return fmt.Errorf("bench: warming up %s: %w", t.cfg.Interface, o.Err)
		}
	}
	return nil
}

// Request is a check ready to send.
type Request struct {
	body  []byte
	check Check
	// idAt is where the request ID's placeholder sits in body, twice
	// (attributes.request.http.id and the x-request-id header): a gRPC
	// check only.
	idAt [2]int
}

// Prepare builds the wire form of every check.
func (t *Target) Prepare(checks []Check) ([]Request, error) {
	out := make([]Request, len(checks))
	for i, c := range checks {
		var b []byte
		var err error
		switch t.cfg.Interface {
		case InterfaceGRPC:
			out[i], err = t.prepareGRPC(c)
			if err != nil {
				return nil, fmt.Errorf("bench: building request %d: %w", i, err)
			}
			continue
		case InterfaceAllowed:
			b, err = json.Marshal(map[string]any{
				"user": c.User, "action": c.Action,
				"resource": map[string]string{"type": c.Type, "key": c.ID, "tenant": c.Tenant},
			})
		case InterfaceAuthZEN:
			b, err = json.Marshal(map[string]any{
				"subject":  map[string]string{"type": "user", "id": c.User},
				"action":   map[string]string{"name": c.Action},
				"resource": map[string]any{"type": c.Type, "id": c.ID, "properties": map[string]string{"tenant": c.Tenant}},
			})
		case InterfaceOPA:
			b, err = json.Marshal(opaInput(c))
		case InterfaceOpenFGA:
			b, err = json.Marshal(fgaCheck(c, t.cfg.Model))
		case InterfaceGateway:
			b = []byte(t.url + c.Path())
		}
		if err != nil {
			return nil, fmt.Errorf("bench: building request %d: %w", i, err)
		}
		out[i] = Request{body: b, check: c}
	}
	return out, nil
}

// envoyRequest is the CheckRequest Envoy sends for the check's request:
// small (no client certificate, a handful of headers), with the request
// ID id.
func envoyRequest(c Check, id string) *authv3.CheckRequest {
	method, path := c.Method(), c.Path()
	const host = "drive.example.com"
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.2", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 41000}}}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.3", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: method, Path: path, Host: host, Scheme: "http", Protocol: "HTTP/1.1",
			Headers: map[string]string{
				":authority": host, ":method": method, ":path": path, ":scheme": "http",
				"x-user": c.User, "user-agent": "nexus-bench", "accept": "*/*", "x-request-id": id,
			},
		}},
	}}
}

// idDigits is the width of a request ID's sequence number: every uint64
// in base 36, zero-padded.
const idDigits = 13

// prepareGRPC marshals the check's CheckRequest once, as Envoy would
// send it (one message, each field once), with a placeholder request ID
// of the width every ID has, and records where the placeholder is: each
// send writes its own ID there (stamped) without marshalling again.
func (t *Target) prepareGRPC(c Check) (Request, error) {
	ph := t.idPrefix + strings.Repeat("~", idDigits)
	b, err := proto.Marshal(envoyRequest(c, ph))
	if err != nil {
		return Request{}, err
	}
	r := Request{body: b, check: c}
	from := 0
	for i := range r.idAt {
		at := bytes.Index(b[from:], []byte(ph))
		if at < 0 {
			return Request{}, fmt.Errorf("the request ID is not where it was written")
		}
		r.idAt[i] = from + at
		from += at + len(ph)
	}
	if bytes.Contains(b[from:], []byte(ph)) {
		return Request{}, fmt.Errorf("the request ID is written more than twice")
	}
	return r, nil
}

// stamped appends r's body to dst with the request ID for sequence
// number seq written in (prepareGRPC).
func (t *Target) stamped(dst []byte, r *Request, seq uint64) []byte {
	var id [idDigits]byte
	for i := idDigits - 1; i >= 0; i-- {
		id[i] = "0123456789abcdefghijklmnopqrstuvwxyz"[seq%36]
		seq /= 36
	}
	start := len(dst)
	dst = append(dst, r.body...)
	for _, at := range r.idAt {
		copy(dst[start+at+len(t.idPrefix):], id[:])
	}
	return dst
}

// Outcome is the result of sending one check.
type Outcome struct {
	// Allowed is the decision (false on an error).
	Allowed bool
	// Err is a transport error, a gRPC error or an HTTP status other
	// than 200; nil for a decision.
	Err error
	// HTTPStatus is the HTTP status (HTTP interfaces), GRPCCode the gRPC
	// status of the call (gRPC).
	HTTPStatus int
	GRPCCode   codes.Code
}

// rawMsg carries prepared wire bytes through gRPC's codec.
type rawMsg struct {
	body []byte
	code int32
	ok   bool
}

// rawCodec sends prepared bytes and reads only the status code of a
// CheckResponse. It is named "proto" so the server decodes with its own.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("bench: rawCodec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.body)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("bench: rawCodec cannot unmarshal into %T", v)
	}
	code, ok, err := statusCode(data.Materialize())
	m.code, m.ok = code, ok
	return err
}

// statusCode reads CheckResponse.status.code (0 when absent, as
// protobuf's default).
func statusCode(b []byte) (int32, bool, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			st, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, false, protowire.ParseError(n)
			}
			var code int32
			for len(st) > 0 {
				num, typ, n := protowire.ConsumeTag(st)
				if n < 0 {
					return 0, false, protowire.ParseError(n)
				}
				st = st[n:]
				if num == 1 && typ == protowire.VarintType {
					v, n := protowire.ConsumeVarint(st)
					if n < 0 {
						return 0, false, protowire.ParseError(n)
					}
					code = int32(v)
					st = st[n:]
					continue
				}
				n = protowire.ConsumeFieldValue(num, typ, st)
				if n < 0 {
					return 0, false, protowire.ParseError(n)
				}
				st = st[n:]
			}
			return code, true, nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, false, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return 0, false, nil
}

// grpcOutcome is the decision a CheckResponse's status code carries.
func grpcOutcome(code int32) Outcome {
	switch codes.Code(code) {
	case codes.OK:
		return Outcome{Allowed: true}
	case codes.PermissionDenied, codes.Unauthenticated:
		return Outcome{}
	default:
		return Outcome{Err: fmt.Errorf("bench: check status %v", codes.Code(code))}
	}
}

var checkMethod = "/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check"

var httpBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Send sends one prepared check and waits for the answer.
func (t *Target) Send(ctx context.Context, r *Request) Outcome {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	seq := t.seq.Add(1)
	if t.cfg.Interface == InterfaceGRPC {
		if len(t.h2) > 0 {
			var mb [512]byte
			cl, err := t.h2[t.next.Add(1)%uint64(len(t.h2))].call(ctx, t.stamped(mb[:0], r, seq))
			if err != nil {
				return Outcome{Err: err, GRPCCode: status.Code(err)}
			}
			code, _, err := statusCode(cl.resp)
			cl.release()
			if err != nil {
				return Outcome{Err: err}
			}
			return grpcOutcome(code)
		}
		m := &rawMsg{body: t.stamped(nil, r, seq)}
		conn := t.conns[t.next.Add(1)%uint64(len(t.conns))]
		err := conn.Invoke(ctx, checkMethod, m, m, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return Outcome{Err: err, GRPCCode: status.Code(err)}
		}
		return grpcOutcome(m.code)
	}
	if t.cfg.Interface == InterfaceGateway {
		return t.sendGateway(ctx, r)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(r.body))
	if err != nil {
		return Outcome{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if t.auth != "" {
		req.Header.Set("Authorization", t.auth)
	}
	resp, err := t.http.Do(req)
	if err != nil {
		return Outcome{Err: err}
	}
	bp := httpBufs.Get().(*[]byte)
	buf := bytes.NewBuffer((*bp)[:0])
	_, err = io.Copy(buf, resp.Body)
	resp.Body.Close()
	defer func() { *bp = buf.Bytes()[:0]; httpBufs.Put(bp) }()
	if err != nil {
		return Outcome{Err: err, HTTPStatus: resp.StatusCode}
	}
	if resp.StatusCode != http.StatusOK {
		return Outcome{Err: fmt.Errorf("bench: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(buf.Bytes())), HTTPStatus: resp.StatusCode}
	}
	var key []byte
	switch t.cfg.Interface {
	case InterfaceAuthZEN:
		key = []byte(`"decision":true`)
	case InterfaceOPA:
		key = []byte(`"result":true`)
	case InterfaceOpenFGA:
		key = []byte(`"allowed":true`)
	default:
		key = []byte(`"allow":true`)
	}
	return Outcome{Allowed: bytes.Contains(buf.Bytes(), key), HTTPStatus: resp.StatusCode}
}

// sendGateway sends the check's own request through a proxy: the
// proxy's answer is the decision (2xx allows, 403 denies; anything else
// is an error).
func (t *Target) sendGateway(ctx context.Context, r *Request) Outcome {
	req, err := http.NewRequestWithContext(ctx, r.check.Method(), string(r.body), nil)
	if err != nil {
		return Outcome{Err: err}
	}
	req.Header.Set("X-User", r.check.User)
	resp, err := t.http.Do(req)
	if err != nil {
		return Outcome{Err: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return Outcome{Err: err, HTTPStatus: resp.StatusCode}
	case resp.StatusCode/100 == 2:
		return Outcome{Allowed: true, HTTPStatus: resp.StatusCode}
	case resp.StatusCode == http.StatusForbidden:
		return Outcome{HTTPStatus: resp.StatusCode}
	}
	return Outcome{Err: fmt.Errorf("bench: the proxy answered %d", resp.StatusCode), HTTPStatus: resp.StatusCode}
}

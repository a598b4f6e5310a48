package faultcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Outcome is what a write's answer says about the write.
type Outcome int

// The outcomes of a write.
const (
	// Written: acknowledged (any 2xx); it holds at Answer.Revision.
	Written Outcome = iota + 1
	// NotWritten: the server says it can never apply (503 with
	// "outcome":"not_written", or an older server's "nothing was
	// written"), or refused it as invalid (4xx).
	NotWritten
	// Unknown: anything else (504, another 5xx, a connection cut after
	// the request went out, a client timeout).
	Unknown
	// NotSent: the connection was refused, so the request never left.
	NotSent
)

func (o Outcome) String() string {
	switch o {
	case Written:
		return "written"
	case NotWritten:
		return "not written"
	case Unknown:
		return "unknown"
	case NotSent:
		return "not sent"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Answer is a write's answer, classified.
type Answer struct {
	Outcome  Outcome
	Status   int    // HTTP status, 0 on a transport error
	Revision uint64 // the consistency token of a Written answer
	WriteID  string // the server's write_id, when it gives one
	Body     string // the body, or the transport error
}

// Classify reads a write's answer. It understands both the answers that
// name their outcome ({"outcome":"written"|"not_written"|"unknown",
// "revision","write_id"}) and older ones ({"revision"} on 200, 503 with an
// "error" text that says whether anything was written).
func Classify(status int, body []byte, err error) Answer {
	if err != nil {
		if refused(err) {
			return Answer{Outcome: NotSent, Body: err.Error()}
		}
		return Answer{Outcome: Unknown, Body: err.Error()}
	}
	a := Answer{Status: status, Body: string(body)}
	var out struct {
		Outcome  string          `json:"outcome"`
		Revision json.Number     `json:"revision"`
		WriteID  json.RawMessage `json:"write_id"`
		Error    string          `json:"error"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	_ = d.Decode(&out)
	if len(out.WriteID) > 0 {
		var s string
		if json.Unmarshal(out.WriteID, &s) != nil {
			s = string(out.WriteID)
		}
		a.WriteID = s
	}
	switch {
	case status >= 200 && status < 300:
		a.Outcome = Written
		if n, err := strconv.ParseUint(out.Revision.String(), 10, 64); err == nil {
			a.Revision = n
		}
	case out.Outcome == "not_written":
		a.Outcome = NotWritten
	case out.Outcome == "" && status == http.StatusServiceUnavailable && strings.Contains(out.Error, "nothing was written"):
		a.Outcome = NotWritten
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests && status != http.StatusConflict:
		a.Outcome = NotWritten
	default:
		a.Outcome = Unknown
	}
	return a
}

// refused reports a connection the server's host refused: the request
// never left the client.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// Client speaks to nexus replicas' admin and application APIs.
type Client struct {
	AdminToken string
	AppKey     string
	HTTP       *http.Client
}

// NewClient returns a client whose requests give up after timeout.
func NewClient(adminToken, appKey string, timeout time.Duration) *Client {
	return &Client{AdminToken: adminToken, AppKey: appKey, HTTP: &http.Client{
		Timeout: timeout,
		// A fresh connection per request: a connection kept alive to a
		// replica that was killed would turn a request that never left
		// into an unknown outcome.
		Transport: &http.Transport{DisableKeepAlives: true},
	}}
}

func (c *Client) do(ctx context.Context, method, url, key, body string, header map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// Tenant is the tenant a granted file is placed in.
const Tenant = "acme"

// Write grants (touches) or revokes (deletes) one tuple through admin,
// with an Idempotency-Key header unless key is empty, and with a
// precondition on the tuple unless pre is empty ("must_exist",
// "must_not_exist").
func (c *Client) Write(ctx context.Context, admin string, grant bool, tuple, key, pre string) Answer {
	field := "deletes"
	if grant {
		field = "touches"
	}
	doc := map[string]any{field: []string{tuple}}
	if obj, _, ok := strings.Cut(tuple, "#"); grant && ok && strings.HasPrefix(obj, "file:") {
		// The default schema requires a file's tenant: each grant also
		// places the file in a tenant (a touch that is a no-op when held),
		// so a check is decided by the viewer tuple under test.
		doc[field] = []string{tuple, obj + "#tenant@tenant:" + Tenant}
	}
	if pre != "" {
		doc["preconditions"] = []map[string]string{{"op": pre, "tuple": tuple}}
	}
	body, _ := json.Marshal(doc)
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	status, b, err := c.do(ctx, http.MethodPost, "http://"+admin+"/v1/relationships", c.AdminToken, string(body), h)
	return Classify(status, b, err)
}

// CheckAnswer is a check's answer.
type CheckAnswer struct {
	Status   int
	Decision *bool  // set on a 200 that carries a decision
	Reason   string // the body's "reason"
	Err      error  // transport error
}

// Check asks a replica's AuthZEN endpoint whether user may read
// file:file, with the consistency token unless it is 0.
func (c *Client) Check(ctx context.Context, httpAddr, user, file string, token uint64) CheckAnswer {
	ctxField := ""
	if token != 0 {
		ctxField = `,"context":{"nexus_revision":"` + strconv.FormatUint(token, 10) + `"}`
	}
	body := `{"subject":{"type":"user","id":"` + user + `"},"action":{"name":"read"},"resource":{"type":"file","id":"` + file + `"}` + ctxField + `}`
	status, b, err := c.do(ctx, http.MethodPost, "http://"+httpAddr+"/access/v1/evaluation", c.AppKey, body, nil)
	if err != nil {
		return CheckAnswer{Err: err}
	}
	var out struct {
		Decision *bool  `json:"decision"`
		Reason   string `json:"reason"`
	}
	_ = json.Unmarshal(b, &out)
	a := CheckAnswer{Status: status, Reason: out.Reason}
	if status == http.StatusOK {
		a.Decision = out.Decision
	}
	return a
}

// Revision is a replica's applied revision.
func (c *Client) Revision(ctx context.Context, admin string) (uint64, error) {
	status, b, err := c.do(ctx, http.MethodGet, "http://"+admin+"/v1/revision", c.AdminToken, "", nil)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/revision: %d %s", status, b)
	}
	var out struct {
		Revision uint64 `json:"revision"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("GET /v1/revision: %w", err)
	}
	return out.Revision, nil
}

// Listing is every tuple a replica holds, sorted.
func (c *Client) Listing(ctx context.Context, admin string) ([]string, error) {
	status, b, err := c.do(ctx, http.MethodGet, "http://"+admin+"/v1/relationships?limit=100000", c.AdminToken, "", nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/relationships: %d %s", status, b)
	}
	var out struct {
		Tuples []string `json:"tuples"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/relationships: %w", err)
	}
	slices.Sort(out.Tuples)
	return out.Tuples, nil
}

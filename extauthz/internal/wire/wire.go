// Package wire holds what every transport shares: the one mapping from an
// error's code to HTTP and gRPC statuses, the one error writer (WriteError:
// a stable code and, for failures of nexus, a fixed description), and the
// one reader of JSON request bodies (ReadJSON: a size limit, then Scan's
// depth, duplicate-key and UTF-8 checks; DecodeJSON to decode).
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/pdp"
)

// Status returns err's stable code (pdp.Code) and the HTTP and gRPC
// statuses it answers with. This is the one place where codes meet
// statuses: client errors are 4xx, failures of nexus or its policy 5xx.
func Status(err error) (code string, httpStatus int, grpcCode codes.Code) {
	code = pdp.Code(err)
	switch code {
	case pdp.CodeTooLarge:
		return code, http.StatusRequestEntityTooLarge, codes.InvalidArgument
	case pdp.CodeBadRequest, pdp.CodeUnknownType:
		return code, http.StatusBadRequest, codes.InvalidArgument
	case pdp.CodeBudget:
		return code, http.StatusServiceUnavailable, codes.ResourceExhausted
	case pdp.CodeNotReady, pdp.CodeStoreError, pdp.CodeStoreCorrupt, pdp.CodeRevisionUnavailable, pdp.CodeUnavailable:
		return code, http.StatusServiceUnavailable, codes.Unavailable
	case pdp.CodeDeadline, pdp.CodeOutcomeUnknown:
		return code, http.StatusGatewayTimeout, codes.DeadlineExceeded
	case pdp.CodeCanceled:
		return code, 499, codes.Canceled
	case pdp.CodeConflict, pdp.CodePreconditionFailed:
		return code, http.StatusConflict, codes.FailedPrecondition
	}
	return code, http.StatusInternalServerError, codes.Internal
}

// presizeLimit bounds the buffer ReadBody allocates on the word of a
// request's Content-Length, before any of the body has arrived: a client
// that claims a large body and sends none gets no large buffer for it.
const presizeLimit = 64 << 10

// ReadBody reads a request body of at most limit bytes; more is
// pdp.ErrTooLarge.
//
// A body whose Content-Length is known (and within both limits) is read
// into a buffer of that size and one byte more, to see its end, instead of
// io.ReadAll's 512 bytes grown by copies. A body longer than its
// Content-Length says (net/http does not let one through, but a
// handler's caller might) is read on as any other body is.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := readBody(w, r, limit)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// The client's fault, not the server's: a 400 that says so.
		return nil, pdp.Errorf(pdp.ErrBadRequest, "the request body ended early: it is shorter than its Content-Length, or a chunk is cut")
	}
	return b, err
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > limit || n > presizeLimit {
		return readAll(w, r.Body, limit)
	}
	buf := make([]byte, n+1)
	got := 0
	for got < len(buf) {
		m, err := r.Body.Read(buf[got:])
		got += m
		if err == io.EOF {
			// Closed now, the body is not read again after the
			// handler to see its end, as net/http reads a body left open.
			_ = r.Body.Close()
			return buf[:got], nil
		}
		if err != nil {
			return buf[:got], err
		}
	}
	// More than Content-Length: read on, within the limit, as if the
	// bytes read so far had not been.
	return readAll(w, io.NopCloser(io.MultiReader(bytes.NewReader(buf), r.Body)), limit)
}

// readAll reads body, at most limit bytes of it; more is pdp.ErrTooLarge.
func readAll(w http.ResponseWriter, body io.ReadCloser, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, pdp.Errorf(pdp.ErrTooLarge, "the body is larger than %d bytes", limit)
		}
	}
	return b, err
}

// contentTypeJSON is the Content-Type of JSON answers, shared: net/http
// copies an answer's headers before it writes them, and a handler that
// added a value would append to a slice of this length and capacity,
// which copies it.
var contentTypeJSON = []string{"application/json"}

// SetJSON sets the answer's Content-Type to application/json, as
// w.Header().Set does but without a new slice or respelling the key.
func SetJSON(w http.ResponseWriter) {
	w.Header()["Content-Type"] = contentTypeJSON
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	SetJSON(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serverSide describes, by code, the failures that are nexus' or its
// policy's, not the client's: their details (Go types, store internals,
// the engine's messages) go to the server's log, never to the client.
var serverSide = map[string]string{
	pdp.CodePolicyResult:        "the policy's result is not a decision",
	pdp.CodeUndefined:           "the policy is undefined for this request",
	pdp.CodeStoreError:          "the relationship store cannot answer",
	pdp.CodeStoreCorrupt:        "the relationship store cannot answer: its data file is damaged",
	pdp.CodeDepthExceeded:       "the relationship walk exceeded its depth limit",
	pdp.CodeInternal:            "internal error",
	pdp.CodeNotReady:            "no policy is loaded yet, or this kind of check is disabled",
	pdp.CodeDeadline:            "the evaluation exceeded its time limit",
	pdp.CodeBudget:              "the request's evaluations exceeded its time budget: send fewer or simpler checks",
	pdp.CodeRevisionUnavailable: "the data has not reached the consistency token's revision in time: retry",
	pdp.CodeUnavailable:         "the service cannot take this now: retry later",
	pdp.CodeOutcomeUnknown:      "the write's outcome is not known yet: retry with the same Idempotency-Key to learn it",
}

// Describe is the message a client may see for err: the error itself
// when it is the client's (4xx), a fixed description by code otherwise
// (whose details WriteError logs).
func Describe(err error) string {
	code, status, _ := Status(err)
	if status < 500 {
		return err.Error()
	}
	if d, ok := serverSide[code]; ok {
		return d
	}
	return "the policy evaluation failed (" + code + ")"
}

// WriteError is the one error writer of the HTTP APIs: it answers with
// the error's status and a JSON body {"error": description, "reason":
// code}, the description precise for the client's errors (4xx) and fixed
// by code for the others, whose details go to log.
func WriteError(log *slog.Logger, w http.ResponseWriter, err error) {
	code, status, _ := Status(err)
	switch {
	case log == nil:
	case status >= 500 && code != pdp.CodeRevisionUnavailable:
		log.Error("request failed", "reason", code, "err", err)
	default:
		// A consistency token not reached is the client's choice of
		// revision, counted in the metrics, as client errors are:
		// logging each above debug would let a client flood the log.
		log.Debug("request refused", "reason", code, "err", err)
	}
	WriteJSON(w, status, map[string]string{"error": Describe(err), "reason": code})
}

// Healthz answers that the process is up.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// HealthzDegraded answers that the process is up, and whether it runs
// degraded: {"status": "degraded", "reason": ..., details...} while
// degraded returns a reason, {"status": "ok", details...} otherwise.
// Either is 200: a degraded process still answers checks.
func HealthzDegraded(degraded func() (string, map[string]any)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		reason, details := degraded()
		body := make(map[string]any, len(details)+2)
		for k, v := range details {
			body[k] = v
		}
		body["status"] = "ok"
		if reason != "" {
			body["status"], body["reason"] = "degraded", reason
		}
		WriteJSON(w, http.StatusOK, body)
	}
}

// Readyz answers whether p can decide, with the loaded policy's revision.
// Each health check (the store's Health) must also return nil; the first
// error is the reason, with its code: what is not ready or unavailable (a
// stopped listener, a replica that has not read its log) as nexus tells
// it, other failures (a damaged store) described as Describe does. When
// writes is set (a cluster replica), the answer also says whether writes
// are available ("writes": "available" or "unavailable", with
// "writes_reason"): checks are answered either way, so readiness does not
// depend on it.
func Readyz(p *pdp.PDP, writes func() (bool, string), health ...func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]string{}
		if writes != nil {
			body["writes"] = "available"
			if ok, reason := writes(); !ok {
				body["writes"], body["writes_reason"] = "unavailable", reason
			}
		}
		if !p.Ready() {
			body["status"], body["checks"], body["reason"] = "not ready", "not ready", "no policy loaded"
			WriteJSON(w, http.StatusServiceUnavailable, body)
			return
		}
		for _, h := range health {
			if err := h(); err != nil {
				code, reason := pdp.Code(err), Describe(err)
				if code == pdp.CodeNotReady || code == pdp.CodeUnavailable {
					reason = err.Error() // nexus' own account of its state
				}
				body["status"], body["checks"], body["reason"], body["code"] = "not ready", "not ready", reason, code
				WriteJSON(w, http.StatusServiceUnavailable, body)
				return
			}
		}
		body["status"], body["checks"], body["policy_revision"] = "ready", "ready", p.PolicyRevision()
		WriteJSON(w, http.StatusOK, body)
	}
}

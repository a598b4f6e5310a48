package httpfast

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of a request the Server reads: the
// handler's header is written out when it writes the status (as net/http
// takes its copy then), its body is kept, and the response goes out in
// one write when the handler returns, with the headers net/http adds to
// a response whose handler has returned: Date, Content-Length, a sniffed
// Content-Type, "Connection: close" when the connection ends.
type response struct {
	req    *http.Request
	header http.Header
	status int
	// head is the status line and the handler's header lines.
	head []byte
	body []byte
	// What the handler's header held when the status was written.
	hasType, hasLength, hasDate, hasEncoding, unsupported bool
	length                                                int64
}

func (w *response) reset(req *http.Request) {
	w.req = req
	if w.header == nil {
		w.header = make(http.Header, 4)
	} else {
		clear(w.header)
	}
	w.status = 0
	w.head, w.body = w.head[:0], w.body[:0]
	w.hasType, w.hasLength, w.hasDate, w.hasEncoding, w.unsupported = false, false, false, false, false
}

func (w *response) Header() http.Header { return w.header }

func (w *response) Write(p []byte) (int, error) {
	if err := w.bodyWrite(); err != nil {
		return 0, err
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// WriteString lets io.WriteString skip a conversion.
func (w *response) WriteString(s string) (int, error) {
	if err := w.bodyWrite(); err != nil {
		return 0, err
	}
	w.body = append(w.body, s...)
	return len(s), nil
}

// bodyWrite writes the status (200) if the handler has not, and refuses
// a body the status does not allow, as net/http does.
func (w *response) bodyWrite() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return http.ErrBodyNotAllowed
	}
	return nil
}

// WriteHeader records the status and writes the status line and the
// handler's header as they are now. Informational statuses (1xx) are not
// sent: no handler behind the Server sends one, and a later status
// replaces it, so the client still gets one final status.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.status != 0 || code < 200 {
		return
	}
	w.status = code
	w.head = append(w.head, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		w.head = strconv.AppendInt(w.head, int64(code), 10)
		w.head = append(w.head, ' ')
		w.head = append(w.head, text...)
	} else {
		w.head = append(w.head, strconv.Itoa(code + 1000)[1:]...)
		w.head = append(w.head, " status code "...)
		w.head = strconv.AppendInt(w.head, int64(code), 10)
	}
	w.head = append(w.head, "\r\n"...)
	h := w.header
	_, w.hasType = h["Content-Type"]
	_, w.hasDate = h["Date"]
	w.hasEncoding = h.Get("Content-Encoding") != ""
	if v, ok := h["Content-Length"]; ok {
		w.hasLength = true
		n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err != nil || len(v) > 1 || n < 0 {
			w.unsupported = true
		}
		w.length = n
	}
	for k := range h {
		switch {
		case k == "Connection", k == "Transfer-Encoding", k == "Trailer", strings.HasPrefix(k, http.TrailerPrefix):
			w.unsupported = true
		}
	}
	var exclude map[string]bool
	if !bodyAllowed(code) {
		exclude = suppressed(code)
		w.hasLength = false
	}
	_ = h.WriteSubset((*appender)(&w.head), exclude)
}

// finish returns out with the whole response appended, and whether it may
// be sent: false for a header this writer does not write the way net/http
// would (a Connection, Transfer-Encoding or Trailer the handler set, a
// Content-Length other than the body's); the connection is then closed
// without an answer, and the error logged.
func (w *response) finish(out []byte, keep bool) ([]byte, bool) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.unsupported || (w.hasLength && w.length != int64(len(w.body))) {
		return out, false
	}
	out = append(out, w.head...)
	if !w.hasDate {
		out = append(out, "Date: "...)
		out = appendDate(out)
		out = append(out, "\r\n"...)
	}
	allowed := bodyAllowed(w.status)
	if allowed && !w.hasLength {
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, int64(len(w.body)), 10)
		out = append(out, "\r\n"...)
	}
	if allowed && !w.hasType && !w.hasEncoding && len(w.body) > 0 {
		out = append(out, "Content-Type: "...)
		out = append(out, http.DetectContentType(w.body)...)
		out = append(out, "\r\n"...)
	}
	if !keep {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	return append(out, w.body...), true
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

// suppressed is the handler's headers net/http leaves out of a response
// without a body.
func suppressed(status int) map[string]bool {
	if status == http.StatusNotModified {
		return map[string]bool{"Content-Type": true, "Content-Length": true, "Transfer-Encoding": true}
	}
	return map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
}

// appender lets http.Header.WriteSubset, which sanitises values as
// net/http does, append to a byte slice.
type appender []byte

func (a *appender) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

func (a *appender) WriteString(s string) (int, error) {
	*a = append(*a, s...)
	return len(s), nil
}

// appendDate appends the Date header's value for now, as net/http writes
// it. The value changes once a second: it is formatted once a second and
// copied for the other responses of that second.
func appendDate(out []byte) []byte {
	now := time.Now()
	sec := now.Unix()
	d := lastDate.Load()
	if d == nil || d.sec != sec {
		d = &date{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
		lastDate.Store(d)
	}
	return append(out, d.b...)
}

// date is the Date header's value for one second.
type date struct {
	sec int64
	b   []byte
}

// lastDate is the last second formatted.
var lastDate atomic.Pointer[date]

package edge

import (
	"errors"

	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// fakeHost is a proxywasm.Host in memory for the native tests.
type fakeHost struct {
	now      int64
	config   []byte
	headers  proxywasm.Pairs
	replaced map[string]string
	removed  []string
	local    *localReply
	last     localReply
	tick     uint32
	calls    []fakeCall
	token    uint32
	reply    struct {
		headers proxywasm.Pairs
		body    []byte
	}
	logs     []string
	counters map[uint32]int64
	failCall bool
}

type localReply struct {
	status  uint32
	details string
	body    []byte
	headers proxywasm.Pairs
}

type fakeCall struct {
	cluster string
	headers [][2]string
	token   uint32
}

var _ proxywasm.Host = (*fakeHost)(nil)

func newFakeHost() *fakeHost {
	return &fakeHost{now: 1_700_000_000e9, replaced: map[string]string{}, counters: map[uint32]int64{}}
}

func (h *fakeHost) Log(_ proxywasm.LogLevel, msg string) { h.logs = append(h.logs, msg) }
func (h *fakeHost) Now() int64                           { return h.now }
func (h *fakeHost) PluginConfiguration(size int) ([]byte, error) {
	if size != len(h.config) {
		return nil, errors.New("size mismatch")
	}
	return h.config, nil
}
func (h *fakeHost) RequestHeaders() (proxywasm.Pairs, error) { return h.headers, nil }
func (h *fakeHost) ReplaceRequestHeader(name, value string) error {
	h.replaced[name] = value
	return nil
}
func (h *fakeHost) RemoveRequestHeader(name string) error {
	h.removed = append(h.removed, name)
	return nil
}
func (h *fakeHost) SendLocalResponse(status uint32, details string, body []byte, headers proxywasm.Pairs) error {
	h.last = localReply{status: status, details: details, body: body, headers: headers}
	h.local = &h.last
	return nil
}
func (h *fakeHost) SetTickPeriod(ms uint32) error { h.tick = ms; return nil }
func (h *fakeHost) HTTPCall(cluster string, headers [][2]string, _ []byte, _ uint32) (uint32, error) {
	if h.failCall {
		return 0, &proxywasm.StatusError{Call: "proxy_http_call", Status: proxywasm.StatusBadArgument}
	}
	h.token++
	h.calls = append(h.calls, fakeCall{cluster: cluster, headers: headers, token: h.token})
	return h.token, nil
}
func (h *fakeHost) HTTPCallResponseHeaders() (proxywasm.Pairs, error) { return h.reply.headers, nil }
func (h *fakeHost) HTTPCallResponseBody(size int) ([]byte, error) {
	if size != len(h.reply.body) {
		return nil, errors.New("size mismatch")
	}
	return h.reply.body, nil
}
func (h *fakeHost) DefineCounter(name string) (uint32, error) {
	for i, n := range metricNames {
		if n == name {
			return uint32(i), nil
		}
	}
	return 0, errors.New("unknown metric " + name)
}
func (h *fakeHost) IncrementCounter(id uint32, delta int64) error {
	h.counters[id] += delta
	return nil
}

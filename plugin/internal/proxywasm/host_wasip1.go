//go:build wasip1

package proxywasm

import (
	"fmt"
	"unsafe"
)

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetCurrentTimeNanoseconds(out *uint64) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(bufType, start, maxSize uint32, outPtr, outSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mapType uint32, outPtr, outSize *uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, details unsafe.Pointer, detailsSize uint32, body unsafe.Pointer, bodySize uint32, headers unsafe.Pointer, headersSize uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriodMilliseconds(ms uint32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(upstream unsafe.Pointer, upstreamSize uint32, headers unsafe.Pointer, headersSize uint32, body unsafe.Pointer, bodySize uint32, trailers unsafe.Pointer, trailersSize uint32, timeoutMS uint32, outToken *uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(metricType uint32, name unsafe.Pointer, nameSize uint32, outID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

// Out parameters of host calls. They are package variables, not locals, so
// taking their address does not move them to the heap on every call (the
// compiler must assume a wasmimport call keeps its pointer arguments); the
// module runs on one thread and no callback re-enters a host call that uses
// them.
var (
	outPtr, outSize, outID uint32
	outTime                uint64
)

// WasmHost implements Host with the Proxy-Wasm ABI 0.2.1 host calls.
type WasmHost struct{}

var _ Host = WasmHost{}

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// Log implements Host.
func (WasmHost) Log(level LogLevel, msg string) {
	proxyLog(uint32(level), strPtr(msg), uint32(len(msg)))
}

// Now implements Host; it returns 0 if the host fails.
func (WasmHost) Now() int64 {
	if proxyGetCurrentTimeNanoseconds(&outTime) != uint32(StatusOK) {
		return 0
	}
	return int64(outTime)
}

// taken returns the block the host reported, releasing the arena's reference.
func taken(call string, ptr, size uint32) ([]byte, error) {
	if size == 0 {
		if ptr != 0 {
			mem.take(ptr, 0)
		}
		return nil, nil
	}
	b, ok := mem.take(ptr, size)
	if !ok {
		return nil, fmt.Errorf("%s: %w", call, ErrNoAllocation)
	}
	return b, nil
}

func bufferBytes(t BufferType, size int) ([]byte, error) {
	if size <= 0 {
		return nil, nil
	}
	mem.reserve(size)
	outPtr, outSize = 0, 0
	if err := statusErr("proxy_get_buffer_bytes", Status(proxyGetBufferBytes(uint32(t), 0, uint32(size), &outPtr, &outSize))); err != nil {
		return nil, err
	}
	return taken("proxy_get_buffer_bytes", outPtr, outSize)
}

func headerPairs(t MapType) (Pairs, error) {
	outPtr, outSize = 0, 0
	if err := statusErr("proxy_get_header_map_pairs", Status(proxyGetHeaderMapPairs(uint32(t), &outPtr, &outSize))); err != nil {
		return nil, err
	}
	b, err := taken("proxy_get_header_map_pairs", outPtr, outSize)
	if err != nil {
		return nil, err
	}
	return ParsePairs(b)
}

// PluginConfiguration implements Host.
func (WasmHost) PluginConfiguration(size int) ([]byte, error) {
	return bufferBytes(BufferPluginConfiguration, size)
}

// RequestHeaders implements Host.
func (WasmHost) RequestHeaders() (Pairs, error) { return headerPairs(MapRequestHeaders) }

// ReplaceRequestHeader implements Host.
func (WasmHost) ReplaceRequestHeader(name, value string) error {
	return statusErr("proxy_replace_header_map_value", Status(proxyReplaceHeaderMapValue(uint32(MapRequestHeaders),
		strPtr(name), uint32(len(name)), strPtr(value), uint32(len(value)))))
}

// RemoveRequestHeader implements Host.
func (WasmHost) RemoveRequestHeader(name string) error {
	return statusErr("proxy_remove_header_map_value", Status(proxyRemoveHeaderMapValue(uint32(MapRequestHeaders),
		strPtr(name), uint32(len(name)))))
}

// SendLocalResponse implements Host.
func (WasmHost) SendLocalResponse(status uint32, details string, body []byte, h Pairs) error {
	return statusErr("proxy_send_local_response", Status(proxySendLocalResponse(status,
		strPtr(details), uint32(len(details)), bytesPtr(body), uint32(len(body)),
		bytesPtr(h), uint32(len(h)), -1)))
}

// SetTickPeriod implements Host.
func (WasmHost) SetTickPeriod(ms uint32) error {
	return statusErr("proxy_set_tick_period_milliseconds", Status(proxySetTickPeriodMilliseconds(ms)))
}

// HTTPCall implements Host.
func (WasmHost) HTTPCall(cluster string, headers [][2]string, body []byte, timeoutMS uint32) (uint32, error) {
	h := EncodePairs(headers)
	outID = 0
	err := statusErr("proxy_http_call", Status(proxyHTTPCall(strPtr(cluster), uint32(len(cluster)),
		bytesPtr(h), uint32(len(h)), bytesPtr(body), uint32(len(body)), nil, 0, timeoutMS, &outID)))
	return outID, err
}

// HTTPCallResponseHeaders implements Host.
func (WasmHost) HTTPCallResponseHeaders() (Pairs, error) {
	return headerPairs(MapHTTPCallResponseHeaders)
}

// HTTPCallResponseBody implements Host.
func (WasmHost) HTTPCallResponseBody(size int) ([]byte, error) {
	return bufferBytes(BufferHTTPCallResponseBody, size)
}

// DefineCounter implements Host.
func (WasmHost) DefineCounter(name string) (uint32, error) {
	outID = 0
	err := statusErr("proxy_define_metric", Status(proxyDefineMetric(uint32(MetricCounter), strPtr(name), uint32(len(name)), &outID)))
	return outID, err
}

// IncrementCounter implements Host.
func (WasmHost) IncrementCounter(id uint32, delta int64) error {
	return statusErr("proxy_increment_metric", Status(proxyIncrementMetric(id, delta)))
}

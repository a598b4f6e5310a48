package proxywasm

// Status is a Proxy-Wasm host call result (WasmResult in Envoy).
type Status uint32

// Host call results of ABI 0.2.1.
const (
	StatusOK                  Status = 0
	StatusNotFound            Status = 1
	StatusBadArgument         Status = 2
	StatusSerializationFailed Status = 3
	StatusParseFailure        Status = 4
	StatusInvalidMemoryAccess Status = 6
	StatusEmpty               Status = 7
	StatusCASMismatch         Status = 8
	StatusInternalFailure     Status = 10
	StatusUnimplemented       Status = 12
)

// LogLevel is the level of proxy_log.
type LogLevel uint32

// Log levels of proxy_log.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

// MapType selects a header map in proxy_*_header_map_* calls.
type MapType uint32

// Header maps of ABI 0.2.1.
const (
	MapRequestHeaders          MapType = 0
	MapRequestTrailers         MapType = 1
	MapResponseHeaders         MapType = 2
	MapResponseTrailers        MapType = 3
	MapHTTPCallResponseHeaders MapType = 6
)

// BufferType selects a buffer in proxy_get_buffer_bytes.
type BufferType uint32

// Buffers of ABI 0.2.1.
const (
	BufferHTTPRequestBody      BufferType = 0
	BufferHTTPCallResponseBody BufferType = 4
	BufferVMConfiguration      BufferType = 6
	BufferPluginConfiguration  BufferType = 7
)

// Action is what proxy_on_request_headers tells the host to do next.
type Action uint32

// Actions of ABI 0.2.1.
const (
	// ActionContinue lets the request go on to the next filter.
	ActionContinue Action = 0
	// ActionPause stops iteration; used after a local response was sent.
	ActionPause Action = 1
)

// MetricType is the kind of a metric defined with proxy_define_metric.
type MetricType uint32

// MetricCounter is a monotonically increasing counter.
const MetricCounter MetricType = 0

// Handler receives the callbacks the exported proxy_on_* functions dispatch.
// Root contexts have parentID 0; HTTP stream contexts have their root
// context as parent. Callbacks never run concurrently within one VM.
type Handler interface {
	// OnVMStart runs once per VM; false fails the VM start.
	OnVMStart(vmConfigSize int) bool
	// OnContextCreate announces a root (parentID 0) or stream context.
	OnContextCreate(id, parentID uint32)
	// OnConfigure hands the plugin configuration size to root context id;
	// false fails the plugin start.
	OnConfigure(rootID uint32, configSize int) bool
	// OnTick runs every tick period set by Host.SetTickPeriod.
	OnTick(rootID uint32)
	// OnHTTPCallResponse delivers the reply of Host.HTTPCall; numHeaders is 0
	// when the call failed (reset, timeout, no healthy upstream).
	OnHTTPCallResponse(rootID, token uint32, numHeaders, bodySize, numTrailers int)
	// OnRequestHeaders sees a stream's request headers.
	OnRequestHeaders(id uint32, numHeaders int, endOfStream bool) Action
	// OnDone asks whether a context may be deleted.
	OnDone(id uint32) bool
	// OnDelete forgets a context.
	OnDelete(id uint32)
}

// Host is what the plugin may ask of the proxy. WasmHost implements it over
// the real ABI; tests use fakes. The effective context is the one of the
// running callback.
type Host interface {
	// Log writes msg to the proxy's log at level.
	Log(level LogLevel, msg string)
	// Now returns the proxy's wall clock in nanoseconds since the Unix epoch.
	Now() int64
	// PluginConfiguration returns the plugin configuration bytes.
	PluginConfiguration(size int) ([]byte, error)
	// RequestHeaders returns the request header map of the current stream.
	RequestHeaders() (Pairs, error)
	// ReplaceRequestHeader sets a request header, replacing any value.
	ReplaceRequestHeader(name, value string) error
	// RemoveRequestHeader removes a request header.
	RemoveRequestHeader(name string) error
	// SendLocalResponse answers the current stream from the proxy; headers
	// are in the ABI's encoding (EncodePairs), so a fixed reply is encoded once.
	SendLocalResponse(status uint32, details string, body []byte, headers Pairs) error
	// SetTickPeriod sets the period of OnTick in milliseconds.
	SetTickPeriod(ms uint32) error
	// HTTPCall sends a request to an upstream cluster; the reply comes to
	// Handler.OnHTTPCallResponse with the returned token.
	HTTPCall(cluster string, headers [][2]string, body []byte, timeoutMS uint32) (token uint32, err error)
	// HTTPCallResponseHeaders returns the headers of the reply being delivered.
	HTTPCallResponseHeaders() (Pairs, error)
	// HTTPCallResponseBody returns the body of the reply being delivered.
	HTTPCallResponseBody(size int) ([]byte, error)
	// DefineCounter defines (or finds) a counter metric.
	DefineCounter(name string) (uint32, error)
	// IncrementCounter adds delta to a counter metric.
	IncrementCounter(id uint32, delta int64) error
}

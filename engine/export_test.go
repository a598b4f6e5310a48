package engine

import "context"

// EvalRuntimeParse evaluates with input text (JSON or OPA's value syntax,
// with sets and non-string keys) read by OPA's Wasm runtime's own parser
// inside the module, the way every evaluation read its input before the
// Go writer: the reference the writer's tests compare with.
func (e *Engine) EvalRuntimeParse(ctx context.Context, entrypoint string, input, dst []byte) ([]byte, error) {
	return e.eval(ctx, entrypoint, inputSource{json: input, runtimeParse: true}, dst)
}

// PureBuiltin is pureBuiltin, for the tests of the result memo.
var PureBuiltin = pureBuiltin

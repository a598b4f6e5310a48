package input

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	opautil "github.com/open-policy-agent/opa/v1/util"
)

// partialBodyHeader is set to "true" by Envoy when it sent the
// authorization server only the first max_request_bytes of the body.
const partialBodyHeader = "x-envoy-auth-partial-body"

// body writes parsed_body's value when write (nothing when it is null,
// and wrote says whether it wrote one), and reports truncated_body, as
// opa-envoy-plugin computes them; without write it only reports
// truncated_body, and never parses the body:
//
//   - a body Envoy marked partial is truncated, whatever its type;
//   - only a JSON, form or multipart body (by its content-type) is parsed;
//     any other body, or none, is null, and so is a gRPC body (the plugin
//     parses one only with protobuf descriptors configured, which nexus
//     does not take);
//   - the body field, or raw_body when it is empty, is the payload;
//   - a content-length larger than the payload means truncated (null,
//     unparsed); one that is not a number is an error;
//   - a body that does not parse is an error.
func (b *builder) body(headers map[string]string, body string, rawBody []byte, write bool) (wrote, truncated bool, err error) {
	if headers[partialBodyHeader] == "true" {
		return false, true, nil
	}
	ct, ok := headers["content-type"]
	if !ok {
		return false, false, nil
	}
	const (
		isJSON = iota
		isForm
		isMultipart
	)
	var kind int
	switch {
	case strings.Contains(ct, "application/json"):
		kind = isJSON
	case strings.Contains(ct, "application/grpc"):
		return false, false, nil
	case strings.Contains(ct, "application/x-www-form-urlencoded"):
		kind = isForm
	case strings.Contains(ct, "multipart/form-data"):
		kind = isMultipart
	default:
		return false, false, nil
	}
	payload := rawBody
	if body != "" {
		// Read only: the parsers below never write to their input.
		payload = unsafe.Slice(unsafe.StringData(body), len(body))
	}
	if len(payload) == 0 {
		return false, false, nil
	}
	if cl, ok := headers["content-length"]; ok {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil {
			return false, false, requestError(ErrInvalidBody, err, "content-length %q", truncate(cl))
		}
		if n > int64(len(payload)) { // -1, unknown, is never larger
			return false, true, nil
		}
	}
	if !write {
		return false, false, nil
	}
	switch kind {
	case isJSON:
		err = b.jsonBody(payload)
		wrote = err == nil
	case isForm:
		var vals url.Values
		if vals, err = url.ParseQuery(string(payload)); err != nil {
			return false, false, requestError(ErrInvalidBody, err, "form")
		}
		b.values(vals)
		wrote = true
	case isMultipart:
		wrote, err = b.multipart(ct, payload)
	}
	return wrote, false, err
}

// jsonBody writes a JSON body as the plugin's decoder reads it. A valid
// UTF-8 body without surrogate escapes is written as its text without its
// insignificant spaces; any other is decoded as encoding/json decodes it
// (invalid UTF-8 and lone surrogates become U+FFFD, of two equal keys the
// last wins) and written as those values.
func (b *builder) jsonBody(p []byte) error {
	if !json.Valid(p) {
		_, err := decodeJSON(p)
		return requestError(ErrInvalidBody, err, "JSON")
	}
	if utf8.Valid(p) && !hasSurrogateEscape(p) {
		b.tmp = appendCompact(b.tmp[:0], p)
		b.w.JSON(b.tmp)
		return nil
	}
	v, err := decodeJSON(p)
	if err != nil {
		return requestError(ErrInvalidBody, err, "JSON")
	}
	b.anyValue(v)
	return nil
}

// decodeJSON decodes one JSON value, numbers as json.Number, and nothing
// after it, with the function opa-envoy-plugin decodes bodies with (OPA's
// util.UnmarshalJSON), so that values and errors are the same.
func decodeJSON(b []byte) (any, error) {
	var v any
	if err := opautil.UnmarshalJSON(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// appendCompact appends valid JSON without its insignificant spaces.
func appendCompact(dst, b []byte) []byte {
	start, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, b[start:i]...)
			start = i + 1
		}
	}
	return append(dst, b[start:]...)
}

// hasSurrogateEscape reports whether b may hold a \uD800-\uDFFF escape,
// which the policy engine's JSON reader refuses alone and encoding/json
// reads (paired or alone) as one character.
func hasSurrogateEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+4 > len(b) {
			return false
		}
		if c, d := b[i+2]|0x20, b[i+3]|0x20; c == 'd' && (d >= '8' && d <= '9' || d >= 'a' && d <= 'f') {
			return true
		}
		b = b[i+2:]
	}
}

// anyValue writes a decoded JSON value (as decodeJSON gives them, or a
// multipart part's string), object keys sorted.
func (b *builder) anyValue(v any) {
	switch v := v.(type) {
	case nil:
		b.w.Null()
	case bool:
		b.w.Bool(v)
	case json.Number:
		b.w.Number(string(v))
	case string:
		b.text(v)
	case []any:
		b.w.BeginArray()
		for _, e := range v {
			b.anyValue(e)
		}
		b.w.End()
	case map[string]any:
		b.w.BeginObject()
		var kb [8]string
		for k, e := range entries(b, v, kb[:0]) {
			b.text(k)
			b.anyValue(e)
		}
		b.w.End()
	default:
		panic(fmt.Sprintf("input: anyValue: unexpected %T", v))
	}
}

// multipart writes a multipart/form-data body as the plugin reads it:
// each named part's values under its name, in order; a part whose
// content-type is JSON as its JSON value, any other as a string. A
// content-type without a boundary is null (nothing written).
func (b *builder) multipart(ct string, payload []byte) (wrote bool, err error) {
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false, requestError(ErrInvalidBody, err, "multipart content-type")
	}
	boundary, ok := params["boundary"]
	if !ok {
		return false, nil
	}
	values := map[string][]any{}
	mr := multipart.NewReader(bytes.NewReader(payload), boundary)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, requestError(ErrInvalidBody, err, "multipart")
		}
		name := p.FormName()
		if name == "" {
			continue
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return false, requestError(ErrInvalidBody, err, "multipart part %q", truncate(name))
		}
		var v any = string(data)
		if strings.Contains(p.Header.Get("Content-Type"), "application/json") {
			if v, err = decodeJSON(data); err != nil {
				return false, requestError(ErrInvalidBody, err, "multipart part %q: JSON", truncate(name))
			}
		}
		values[name] = append(values[name], v)
	}
	writeLists(b, values, b.anyValue)
	return true, nil
}

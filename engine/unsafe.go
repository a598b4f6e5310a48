package engine

import (
	"encoding/json"
	"strconv"
	"unsafe"
)

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func jsonNumber(n int64) json.Number { return json.Number(strconv.FormatInt(n, 10)) }

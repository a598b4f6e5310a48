package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Object decodes raw as a JSON object and refuses any key that is not in
// known, naming it as where.key. Keys listed in unsupported are refused
// with "not supported by nexus" (OPA settings nexus knows and does not
// implement). A null or empty raw is an empty object.
func Object(where string, raw json.RawMessage, known []string, unsupported ...string) (map[string]json.RawMessage, error) {
	m, err := Entries(where, raw)
	if err != nil {
		return nil, err
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		switch {
		case slices.Contains(known, k):
		case slices.Contains(unsupported, k):
			return nil, fmt.Errorf("%s: %w", join(where, k), ErrUnsupported)
		default:
			return nil, fmt.Errorf("%s: unknown setting (known: %s)", join(where, k), strings.Join(known, ", "))
		}
	}
	return m, nil
}

// Entries decodes raw as a JSON object whose keys are names the
// configuration chooses (bundles, keys), naming where in its error. A null
// or empty raw is an empty object.
func Entries(where string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if Absent(raw) {
		return m, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: want an object: %w", where, err)
	}
	return m, nil
}

// Absent reports whether a section is absent: empty or null.
func Absent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// Decode decodes the value at m[key] into dst when present, naming
// where.key in its error.
func Decode(where string, m map[string]json.RawMessage, key string, dst any) error {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %w", join(where, key), err)
	}
	return nil
}

// DecodeFields decodes each field present in m into its destination, as
// Decode does, in the order of the fields' names.
func DecodeFields(where string, m map[string]json.RawMessage, fields map[string]any) error {
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if err := Decode(where, m, key, fields[key]); err != nil {
			return err
		}
	}
	return nil
}

// join names a nested setting: join("services.acme", "url").
func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

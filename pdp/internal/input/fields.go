package input

import "strings"

// appendSegments appends the segments of parsed_path for the decoded
// path p.
func appendSegments(dst []string, p string) []string {
	p = strings.TrimLeft(p, "/")
	for {
		seg, rest, more := strings.Cut(p, "/")
		dst = append(dst, seg)
		if !more {
			return dst
		}
		p = rest
	}
}

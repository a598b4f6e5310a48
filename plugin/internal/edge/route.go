package edge

import (
	"errors"
	"strings"
)

// segKind is the kind of one path pattern segment.
type segKind uint8

const (
	segLiteral segKind = iota
	segAny             // "*"
	segTenant          // "{tenant}"
	segRest            // "**", last only
)

type segment struct {
	kind segKind
	lit  string
}

// pattern is a compiled Route.Path.
type pattern struct {
	segs   []segment
	tenant bool // has a {tenant} segment
}

func compilePattern(p string) (pattern, error) {
	if !strings.HasPrefix(p, "/") {
		return pattern{}, errors.New("path must start with /")
	}
	var out pattern
	parts := splitPath(p)
	for i, s := range parts {
		switch s {
		case "*":
			out.segs = append(out.segs, segment{kind: segAny})
		case "**":
			if i != len(parts)-1 {
				return pattern{}, errors.New(`"**" must be the last segment`)
			}
			out.segs = append(out.segs, segment{kind: segRest})
		case "{tenant}":
			if out.tenant {
				return pattern{}, errors.New("at most one {tenant} segment")
			}
			out.tenant = true
			out.segs = append(out.segs, segment{kind: segTenant})
		default:
			if strings.ContainsAny(s, "{}*%") || s == "." || s == ".." {
				return pattern{}, errors.New("segment " + s + " is not a literal, *, ** or {tenant}")
			}
			out.segs = append(out.segs, segment{kind: segLiteral, lit: s})
		}
	}
	return out, nil
}

// splitPath splits a path into its non-empty segments.
func splitPath(p string) []string {
	var out []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// match reports whether path (without query) matches, and the {tenant}
// segment. It walks the path in place, without allocating.
func (p *pattern) match(path string) (tenant string, ok bool) {
	rest := path
	for _, sg := range p.segs {
		if sg.kind == segRest {
			return tenant, true
		}
		var s string
		s, rest, ok = nextSegment(rest)
		if !ok {
			return "", false
		}
		switch sg.kind {
		case segLiteral:
			if s != sg.lit {
				return "", false
			}
		case segTenant:
			tenant = s
		}
	}
	if _, _, more := nextSegment(rest); more {
		return "", false
	}
	return tenant, true
}

// nextSegment returns the next non-empty segment of p and what follows it.
func nextSegment(p string) (seg, rest string, ok bool) {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if p == "" {
		return "", "", false
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:], true
	}
	return p, "", true
}

// cleanPath strips the query and fragment and reports whether the path is
// one the edge may decide on: absolute, with no "." or ".." segment, no
// percent-encoding and no backslash. Anything else could be normalised by the
// upstream into a path the route rules did not see, so it is passed on.
func cleanPath(p string) (string, bool) {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '?', '#':
			p = p[:i]
		case '%', '\\':
			return "", false
		default:
			continue
		}
		break
	}
	if len(p) == 0 || p[0] != '/' {
		return "", false
	}
	rest := p
	for {
		s, r, ok := nextSegment(rest)
		if !ok {
			return p, true
		}
		if s == "." || s == ".." {
			return "", false
		}
		rest = r
	}
}

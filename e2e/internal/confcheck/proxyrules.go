package confcheck

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ProxyIdentity checks a rendered forward-auth configuration of an nginx,
// Caddy or HAProxy in front of nexus (kind "nginx", "caddy" or "haproxy")
// for the identity rule: header, the subject header nexus trusts, reaches
// nexus and the upstream only as the proxy set it from a user it verified
// itself, never as the client sent it.
//
//   - nginx: auth_basic is on, and every location that proxies (the
//     auth_request location included) sets header to $remote_user with
//     proxy_set_header, which replaces the client's copy.
//   - Caddy: basicauth (basic_auth) comes first, then request_header sets
//     header to {http.auth.user.id}, then forward_auth.
//   - HAProxy: http-request auth (unless http_auth(...)) comes first, then
//     http-request set-header header %[http_auth_user], then the check.
func ProxyIdentity(kind string, conf []byte, header string) error {
	switch kind {
	case "nginx":
		return nginxIdentity(string(conf), header)
	case "caddy":
		return caddyIdentity(string(conf), header)
	case "haproxy":
		return haproxyIdentity(string(conf), header)
	}
	return fmt.Errorf("%w: proxy kind %q", ErrInvalid, kind)
}

// nginxDirective is one directive of an nginx configuration with the
// blocks it sits in ("http", "server", "location = /x").
type nginxDirective struct {
	words  []string
	blocks []string
}

// nginxDirectives splits an nginx configuration into directives (quotes
// and comments as nginx reads them, enough for these files).
func nginxDirectives(conf string) []nginxDirective {
	var out []nginxDirective
	var stack []string
	var words []string
	var word strings.Builder
	inQuote := byte(0)
	flushWord := func() {
		if word.Len() > 0 {
			words = append(words, word.String())
			word.Reset()
		}
	}
	for i := 0; i < len(conf); i++ {
		c := conf[i]
		switch {
		case inQuote != 0:
			if c == inQuote {
				inQuote = 0
				words = append(words, word.String())
				word.Reset()
				continue
			}
			word.WriteByte(c)
		case c == '"' || c == '\'':
			inQuote = c
		case c == '#':
			for i < len(conf) && conf[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			flushWord()
		case c == ';':
			flushWord()
			if len(words) > 0 {
				out = append(out, nginxDirective{words: words, blocks: append([]string{}, stack...)})
			}
			words = nil
		case c == '{':
			flushWord()
			stack = append(stack, strings.Join(words, " "))
			words = nil
		case c == '}':
			flushWord()
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			words = nil
		default:
			word.WriteByte(c)
		}
	}
	return out
}

func nginxIdentity(conf, header string) error {
	ds := nginxDirectives(conf)
	var errs []error
	basic := false
	for _, d := range ds {
		if d.words[0] == "auth_basic" && len(d.words) > 1 && d.words[1] != "off" {
			basic = true
		}
	}
	// Locations that proxy, and what each sets header to.
	proxies := map[string]bool{}
	sets := map[string][]string{}
	for _, d := range ds {
		if len(d.blocks) == 0 {
			continue
		}
		loc := d.blocks[len(d.blocks)-1]
		if !strings.HasPrefix(loc, "location") {
			continue
		}
		switch {
		case d.words[0] == "proxy_pass":
			proxies[loc] = true
		case d.words[0] == "proxy_set_header" && len(d.words) > 1 && strings.EqualFold(d.words[1], header):
			v := ""
			if len(d.words) > 2 {
				v = d.words[2]
			}
			sets[loc] = append(sets[loc], v)
		}
	}
	if len(proxies) == 0 {
		errs = append(errs, fmt.Errorf("%w: nginx: no location proxies anything", ErrInvalid))
	}
	for loc := range proxies {
		vs := sets[loc]
		switch {
		case len(vs) == 0:
			errs = append(errs, fmt.Errorf("%w: nginx %s: the client's %s goes through as it came (no proxy_set_header %s $remote_user)", ErrUnsafe, loc, header, header))
		case vs[len(vs)-1] != "$remote_user":
			errs = append(errs, fmt.Errorf("%w: nginx %s: %s is set to %s, not to the user nginx verified ($remote_user)", ErrUnsafe, loc, header, vs[len(vs)-1]))
		case !basic:
			errs = append(errs, fmt.Errorf("%w: nginx %s: %s is $remote_user but auth_basic is off: nothing verified the user", ErrUnsafe, loc, header))
		}
	}
	return errors.Join(errs...)
}

// otherThan returns the index of a line of lines matching re other than
// line want, or -1.
func otherThan(lines []string, re *regexp.Regexp, want int) int {
	for i, l := range lines {
		if i != want && re.MatchString(strings.TrimSpace(l)) {
			return i
		}
	}
	return -1
}

// lineIndex returns the index of the first line of lines matching re at or
// after from, or -1.
func lineIndex(lines []string, re *regexp.Regexp, from int) int {
	for i := max(from, 0); i < len(lines); i++ {
		if re.MatchString(strings.TrimSpace(lines[i])) {
			return i
		}
	}
	return -1
}

func caddyIdentity(conf, header string) error {
	lines := strings.Split(conf, "\n")
	h := regexp.QuoteMeta(header)
	auth := lineIndex(lines, regexp.MustCompile(`^(basicauth|basic_auth)\b`), 0)
	set := lineIndex(lines, regexp.MustCompile(`(?i)^request_header\s+`+h+`\s+\{http\.auth\.user\.id\}\s*$`), 0)
	check := lineIndex(lines, regexp.MustCompile(`^forward_auth\b`), 0)
	other := otherThan(lines, regexp.MustCompile(`(?i)^(request_header|header_up)\s+\+?`+h+`\s+`), set)
	switch {
	case check < 0:
		return fmt.Errorf("%w: Caddy: no forward_auth", ErrInvalid)
	case auth < 0 || auth > check:
		return fmt.Errorf("%w: Caddy: no basicauth before forward_auth: nothing verifies the user", ErrUnsafe)
	case set < 0 || set > check || set < auth:
		return fmt.Errorf("%w: Caddy: %s is not set to the verified user ({http.auth.user.id}) between basicauth and forward_auth: the client's copy goes through", ErrUnsafe, header)
	case other >= 0:
		return fmt.Errorf("%w: Caddy: line %d sets %s to something else than the verified user", ErrUnsafe, other+1, header)
	}
	return nil
}

func haproxyIdentity(conf, header string) error {
	lines := strings.Split(conf, "\n")
	h := regexp.QuoteMeta(header)
	auth := lineIndex(lines, regexp.MustCompile(`^http-request\s+auth\b.*\bunless\s*\{\s*http_auth\(`), 0)
	set := lineIndex(lines, regexp.MustCompile(`(?i)^http-request\s+set-header\s+`+h+`\s+%\[http_auth_user\]\s*$`), 0)
	check := lineIndex(lines, regexp.MustCompile(`^http-request\s+lua\.`), 0)
	other := otherThan(lines, regexp.MustCompile(`(?i)^http-request\s+(set-header|add-header)\s+`+h+`\s+`), set)
	switch {
	case check < 0:
		return fmt.Errorf("%w: HAProxy: no http-request lua. check", ErrInvalid)
	case auth < 0 || auth > check:
		return fmt.Errorf("%w: HAProxy: no http-request auth before the check: nothing verifies the user", ErrUnsafe)
	case set < 0 || set > check || set < auth:
		return fmt.Errorf("%w: HAProxy: %s is not set to the verified user (%%[http_auth_user]) between http-request auth and the check: the client's copy goes through", ErrUnsafe, header)
	case other >= 0:
		return fmt.Errorf("%w: HAProxy: line %d sets %s to something else than the verified user", ErrUnsafe, other+1, header)
	}
	return nil
}

package confcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Typo is a copy of a YAML file with one mapping key misspelt.
type Typo struct {
	// Path locates the key, as in spec.rules[0].to, for messages.
	Path string
	// Data is the whole file, re-encoded, with the key renamed to Key+"x".
	Data []byte
}

// KeyTypos returns, for every mapping key of every document of a YAML
// stream, the stream with that one key misspelt; and first (index 0 of the
// result, Path "") the stream re-encoded unchanged, so a caller can check
// that re-encoding alone keeps the file valid.
func KeyTypos(data []byte) ([]Typo, error) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
	encode := func() ([]byte, error) {
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		for _, d := range docs {
			if err := enc.Encode(d); err != nil {
				return nil, err
			}
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	orig, err := encode()
	if err != nil {
		return nil, err
	}
	out := []Typo{{Data: orig}}
	type key struct {
		path string
		node *yaml.Node
	}
	var keys []key
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" && !strings.HasSuffix(path, ":") {
					p = path + "." + p
				} else {
					p = path + p
				}
				keys = append(keys, key{p, n.Content[i]})
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	for i, d := range docs {
		prefix := ""
		if len(docs) > 1 {
			prefix = fmt.Sprintf("doc%d:", i+1)
		}
		walk(d, prefix)
	}
	for _, k := range keys {
		was := k.node.Value
		k.node.Value = was + "x"
		b, err := encode()
		k.node.Value = was
		if err != nil {
			return nil, err
		}
		out = append(out, Typo{Path: k.path, Data: b})
	}
	return out, nil
}

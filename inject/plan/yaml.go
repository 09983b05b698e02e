package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// MarshalYAML writes p as plan.yaml: two-space indents, lists of scalars (shapes,
// sources, transforms) on one line, so a plan reads one tensor per few lines.
func MarshalYAML(p *Plan) ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(p); err != nil {
		return nil, fmt.Errorf("inject: encode plan: %w", err)
	}
	flowScalarLists(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("inject: encode plan: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("inject: encode plan: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseYAML reads a plan written by MarshalYAML (or by hand) and checks its
// schema version.
func ParseYAML(b []byte) (*Plan, error) {
	var p Plan
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("inject: plan yaml: %s", yamlError(err))
	}
	if p.Schema != SchemaVersion {
		return nil, fmt.Errorf("inject: plan yaml: schema %d, this build reads %d", p.Schema, SchemaVersion)
	}
	return &p, nil
}

// MarshalJSON writes p as indented JSON (same field names as the YAML).
func MarshalJSON(p *Plan) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("inject: encode plan: %w", err)
	}
	return append(b, '\n'), nil
}

func flowScalarLists(n *yaml.Node) {
	if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
		flow := true
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				flow = false
				break
			}
		}
		if flow {
			n.Style = yaml.FlowStyle
		}
	}
	for _, c := range n.Content {
		flowScalarLists(c)
	}
}

var (
	yamlUnknownField = regexp.MustCompile(`^(line \d+: )?field (\S+) not found in type \S+$`)
	yamlTypeMismatch = regexp.MustCompile("^(line \\d+: )?cannot unmarshal !!(\\w+) (?:`(.*)` )?into (\\S+)$")
)

// yamlError says what is wrong with a plan file in its own terms: YAML kinds and field
// names, never the Go types the plan is decoded into.
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		switch m := yamlUnknownField.FindStringSubmatch(e); {
		case m != nil:
			msgs[i] = fmt.Sprintf("%sunknown field %q", m[1], m[2])
		default:
			if m := yamlTypeMismatch.FindStringSubmatch(e); m != nil {
				got := map[string]string{"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
					"seq": "a list", "map": "a mapping", "null": "null"}[m[2]]
				if got == "" {
					got = "!!" + m[2]
				}
				if m[3] != "" {
					got += " (" + m[3] + ")"
				}
				msgs[i] = fmt.Sprintf("%sexpected %s, got %s", m[1], yamlWant(m[4]), got)
			} else {
				msgs[i] = e
			}
		}
	}
	return strings.Join(msgs, "; ")
}

// yamlWant names what a Go type (as yaml.v3 prints it) expects, in YAML's words.
func yamlWant(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "a mapping"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	}
	return "another kind of value"
}

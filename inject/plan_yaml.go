package inject

import (
	"bytes"
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"
)

// MarshalPlanYAML writes p as plan.yaml: two-space indents, lists of scalars (shapes,
// sources, transforms) on one line, so a plan reads one tensor per few lines.
func MarshalPlanYAML(p *Plan) ([]byte, error) {
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

// UnmarshalPlanYAML reads a plan written by MarshalPlanYAML (or by hand) and checks its
// schema version.
func UnmarshalPlanYAML(b []byte) (*Plan, error) {
	var p Plan
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("inject: plan yaml: %w", err)
	}
	if p.Schema != SchemaVersion {
		return nil, fmt.Errorf("inject: plan yaml: schema %d, this build reads %d", p.Schema, SchemaVersion)
	}
	return &p, nil
}

// MarshalPlanJSON writes p as indented JSON (same field names as the YAML).
func MarshalPlanJSON(p *Plan) ([]byte, error) {
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

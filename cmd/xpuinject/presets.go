package main

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/xpuinject/xpuinject/hub"
)

// Preset is a named model: `xpuinject llama` means meta-llama/Llama-3.2-1B.
type Preset struct {
	Name        string `yaml:"-" json:"name"`
	Repo        string `yaml:"repo" json:"repo"`
	Revision    string `yaml:"revision,omitempty" json:"revision,omitempty"`
	Description string `yaml:"description" json:"description"`
}

// Ref is the preset as a Hub reference (revision "main" when not pinned).
func (p Preset) Ref() hub.Ref {
	rev := p.Revision
	if rev == "" {
		rev = "main"
	}
	return hub.Ref{Repo: p.Repo, Revision: rev}
}

//go:embed presets.yaml
var presetsYAML []byte

var (
	presetsOnce sync.Once
	presets     []Preset
	presetsErr  error
)

// parsePresets reads a presets file: name -> {repo, revision, description}. Every repo
// must be a valid org/name and every name a plain word (no '/', '@').
func parsePresets(b []byte) ([]Preset, error) {
	var m map[string]Preset
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("presets: %w", err)
	}
	out := make([]Preset, 0, len(m))
	for name, p := range m {
		if name == "" || strings.ContainsAny(name, "/@ \\") {
			return nil, fmt.Errorf("presets: bad preset name %q", name)
		}
		if _, err := hub.ParseRef(p.Repo); err != nil {
			return nil, fmt.Errorf("presets: %s: %w", name, err)
		}
		if strings.Contains(p.Repo, "@") {
			return nil, fmt.Errorf("presets: %s: repo %q: put the revision under revision:", name, p.Repo)
		}
		p.Name = name
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Preset) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Presets are the embedded presets, sorted by name.
func Presets() ([]Preset, error) {
	presetsOnce.Do(func() { presets, presetsErr = parsePresets(presetsYAML) })
	return presets, presetsErr
}

// lookupPreset finds a preset by name.
func lookupPreset(name string) (Preset, bool) {
	ps, err := Presets()
	if err != nil {
		return Preset{}, false
	}
	for _, p := range ps {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// presetNames is "presets: a, b, ..." broken into lines of at most 96 columns, for help texts
// and errors.
func presetNames() string {
	ps, _ := Presets()
	var b strings.Builder
	line := "presets:"
	for i, p := range ps {
		word := " " + p.Name
		if i < len(ps)-1 {
			word += ","
		}
		if len(line)+len(word) > 96 {
			b.WriteString(line + "\n")
			line = strings.TrimPrefix(word, " ")
			continue
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

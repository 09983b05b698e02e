package models

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Architecture maps one config.json model_type to typed layers.
type Architecture struct {
	// ModelTypes are the config.json "model_type" values this architecture reads.
	ModelTypes []string
	// Build maps the checkpoint's tensors to layers and checks every tensor a layer
	// needs against the shape the config implies (returning *ShapeError on mismatch).
	Build func(ck *Checkpoint) (*Graph, error)
	// LayerWindows: Build gives each sliding layer its window in Dims["sliding_window"], and
	// a layer without one attends in full whatever config.json's sliding_window says.
	LayerWindows bool
}

var (
	archMu sync.RWMutex
	archs  = map[string]Architecture{}
)

// Register adds an architecture; architecture files call it from init.
// Registering a model_type twice is a programming error and panics at start-up.
func Register(a Architecture) {
	archMu.Lock()
	defer archMu.Unlock()
	for _, t := range a.ModelTypes {
		if _, dup := archs[t]; dup {
			panic("models: model_type registered twice: " + t)
		}
		archs[t] = a
	}
}

// Supported lists the model_type values with a registered architecture, sorted.
func Supported() []string {
	archMu.RLock()
	defer archMu.RUnlock()
	out := make([]string, 0, len(archs))
	for t := range archs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the architecture for a model_type.
func Lookup(modelType string) (Architecture, error) {
	archMu.RLock()
	a, ok := archs[modelType]
	archMu.RUnlock()
	if !ok {
		return Architecture{}, fmt.Errorf("models: unsupported model_type %q (supported: %s)",
			modelType, strings.Join(Supported(), ", "))
	}
	return a, nil
}

// LayerWindows reports whether modelType's layers carry their own sliding windows
// (Architecture.LayerWindows); false for an unknown model_type.
func LayerWindows(modelType string) bool {
	archMu.RLock()
	defer archMu.RUnlock()
	return archs[modelType].LayerWindows
}

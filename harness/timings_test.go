package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAddTimingsMergesTheCommandsStages(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "eval.json")
	spawned := time.Now().Add(-3 * time.Second)
	started := spawned.Add(1500 * time.Millisecond) // the driver's first line, 1.5 s after the spawn
	doc := map[string]any{
		"schema": 3, "kept": "a field Result does not know",
		"timings": map[string]any{"started_at": float64(started.UnixNano()) / 1e9, "driver_s": 1.4,
			"stages": []any{map[string]any{"stage": "load the stock and injected models", "s": 1.2}}},
	}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	start := spawned.Add(-10 * time.Second)
	o := Options{Start: start, Before: []StageTime{{Stage: "pack", S: 6}}}
	// the driver's timings end 1.4 s after its start; its process exits 0.5 s later
	exited := started.Add(1900 * time.Millisecond)
	if err := addTimings(res, path, o, spawned.Add(-time.Second), spawned, exited); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.Timings.Stages {
		names = append(names, s.Stage)
	}
	want := "pack|eval set-up (checks, driver files)|python interpreter start|load the stock and injected models|" +
		"eval driver: write eval.json and exit"
	if strings.Join(names, "|") != want {
		t.Fatalf("stages %q, want %q", names, want)
	}
	if up := float64(res.Timings.Stages[2].S); up < 1.49 || up > 1.51 {
		t.Errorf("interpreter start %.3f s, want 1.5", up)
	}
	if w := float64(res.Timings.WallS); w < 13 || w > 15 {
		t.Errorf("wall %.2f s, want about 13 (from the command's start)", w)
	}
	if down := float64(res.Timings.Stages[4].S); down < 0.49 || down > 0.51 {
		t.Errorf("driver exit %.3f s, want 0.5", down)
	}
	// stages 6 + 1 + 1.5 + 1.2 + 0.5 = 10.2 of about 13: the rest is other
	if o := res.Timings.Other(); o < 2.5 || o > 4.5 {
		t.Errorf("other %.2f s", o)
	}
	b, _ = os.ReadFile(path)
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back["kept"] != "a field Result does not know" || len(back["timings"].(map[string]any)["stages"].([]any)) != 5 {
		t.Errorf("eval.json after the merge: %s", b)
	}
}

func TestReportSaysWhereTheTimeWent(t *testing.T) {
	r := &Result{Timings: &Timings{WallS: 20, Stages: []StageTime{{Stage: "pack", S: 5},
		{Stage: "greedy generation: stock and injected", S: 13}}}}
	var md strings.Builder
	md.Write(Markdown(r, nil))
	for _, s := range []string{"## Where the time went", "The whole run, 20.0 s", "| stage | s | share |\n",
		"| pack | 5.00 | 25 % |\n", "| greedy generation: stock and injected | 13.0 | 65 % |",
		"| other (no stage names it) | 2.00 | 10 % |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, md.String())
		}
	}
	if strings.Contains(md.String(), "kernel compiles") {
		t.Errorf("a run that counted no compiles has no compiles column:\n%s", md.String())
	}

	// the driver counts each stage's Triton compiles: a column, blank where a stage made none
	r.Timings.Stages = []StageTime{{Stage: "pack", S: 5}, {Stage: "compile the injected kernels ahead", S: 3, Compiles: 25},
		{Stage: "greedy generation: stock and injected", S: 10, Compiles: 2}}
	md.Reset()
	md.Write(Markdown(r, nil))
	for _, s := range []string{"(27 in all)", "| stage | s | share | kernel compiles |\n", "| pack | 5.00 | 25 % |  |\n",
		"| compile the injected kernels ahead | 3.00 | 15 % | 25 |\n", "| greedy generation: stock and injected | 10.0 | 50 % | 2 |\n",
		"| other (no stage names it) | 2.00 | 10 % |  |\n"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, md.String())
		}
	}
}

package hub

import "testing"

// Cases checked against Python: fnmatch.fnmatchcase(name, pattern) after
// huggingface_hub's _add_wildcard_to_directories.
func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*.safetensors", "model.safetensors", true},
		{"*.safetensors", "sub/model.safetensors", true}, // '*' crosses '/' in fnmatch
		{"*.json", "config.json.bak", false},
		{"config.json", "config.json", true},
		{"Config.json", "config.json", false},
		{"model-0000?-of-00004.safetensors", "model-00002-of-00004.safetensors", true},
		{"model-0000?-of-00004.safetensors", "model-00012-of-00004.safetensors", false},
		{"[!m]*", "model.bin", false},
		{"[!m]*", "config.json", true},
		{"[a-c]*", "b.txt", true},
		{"[", "[", true},
		{"a[", "a[", true},
		{"original/", "original/params.json", true},
		{"original/", "originalx", false},
		{"a.b", "aXb", false},
		{"(x)+", "(x)+", true},
		{"*", "", true},
	}
	for _, c := range cases {
		if got := matchGlob(c.pattern, c.name); got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestDefaultSelection(t *testing.T) {
	in := []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"tokenizer.model", "special_tokens_map.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "consolidated.safetensors",
		"original/consolidated.00.pth", "pytorch_model.bin", "README.md", ".gitattributes", "onnx/model.safetensors",
		"merges.txt", "vocab.json", "preprocessor_config.json"}
	want := map[string]bool{"config.json": true, "generation_config.json": true, "tokenizer.json": true,
		"tokenizer_config.json": true, "tokenizer.model": true, "special_tokens_map.json": true,
		"model-00001-of-00002.safetensors": true, "model-00002-of-00002.safetensors": true,
		"model.safetensors.index.json": true, "merges.txt": true, "vocab.json": true, "preprocessor_config.json": true}
	got := selectFiles(in, nil, nil)
	if len(got) != len(want) {
		t.Errorf("got %v", got)
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("selected %s", g)
		}
	}
}

func TestNormalizeEtag(t *testing.T) {
	for in, want := range map[string]string{`"abc"`: "abc", `W/"abc"`: "abc", "abc": "abc", `""`: ""} {
		if got := normalizeEtag(in); got != want {
			t.Errorf("normalizeEtag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckRepoPath(t *testing.T) {
	for p, ok := range map[string]bool{"a/b.json": true, "../x": false, "/abs": false, "a//b": false, "a/./b": false, `a\b`: false, "": false} {
		if err := checkRepoPath(p); (err == nil) != ok {
			t.Errorf("checkRepoPath(%q) = %v", p, err)
		}
	}
}

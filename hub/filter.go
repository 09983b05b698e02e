package hub

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// matchGlob reports whether name matches pattern with Python's fnmatch.fnmatchcase rules,
// which huggingface_hub's filter_repo_objects uses (utils/_paths.py): '*' matches any
// run of characters including '/', '?' one character, "[seq]" / "[!seq]" a class; a
// pattern ending in "/" matches everything under that folder.
func matchGlob(pattern, name string) bool {
	if !utf8.ValidString(pattern) {
		return pattern == name // Hub paths are UTF-8; such a pattern can only be literal
	}
	re, err := globRegexp(pattern)
	if err != nil {
		return false
	}
	return re.MatchString(name)
}

func globRegexp(pattern string) (*regexp.Regexp, error) {
	pattern = strings.ReplaceAll(pattern, `\`, "/")
	if strings.HasSuffix(pattern, "/") {
		pattern += "*"
	}
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(pattern); i++ {
		switch ch := pattern[i]; ch {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			j := i + 1
			if j < len(pattern) && pattern[j] == '!' {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++
			}
			for j < len(pattern) && pattern[j] != ']' {
				j++
			}
			if j >= len(pattern) {
				b.WriteString(`\[`)
				continue
			}
			class := pattern[i+1 : j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			} else if strings.HasPrefix(class, "^") {
				class = `\` + class
			}
			class = strings.ReplaceAll(class, `\`, `\\`)
			b.WriteString("[" + class + "]")
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1])) // a byte, not a rune: UTF-8 passes through
		}
	}
	b.WriteString(`\z`)
	return regexp.Compile(b.String())
}

// defaultModelFiles are the top-level files a transformers model needs: config,
// generation config, tokenizer and processor files, safetensors weights and their index.
var defaultModelFiles = map[string]bool{
	"config.json":                  true,
	"generation_config.json":       true,
	"tokenizer.json":               true,
	"tokenizer_config.json":        true,
	"special_tokens_map.json":      true,
	"added_tokens.json":            true,
	"tokenizer.model":              true,
	"spiece.model":                 true,
	"sentencepiece.bpe.model":      true,
	"vocab.json":                   true,
	"vocab.txt":                    true,
	"merges.txt":                   true,
	"chat_template.jinja":          true,
	"chat_template.json":           true,
	"preprocessor_config.json":     true,
	"processor_config.json":        true,
	"image_processor_config.json":  true,
	"model.safetensors.index.json": true,
}

// wantDefault says whether a repository path is among what a model needs by default:
// the names above and top-level "*.safetensors", except Mistral-style
// "consolidated*.safetensors" duplicates of the transformers shards.
func wantDefault(path string) bool {
	if strings.Contains(path, "/") {
		return false
	}
	if defaultModelFiles[path] {
		return true
	}
	return strings.HasSuffix(path, ".safetensors") && !strings.HasPrefix(path, "consolidated")
}

// selectFiles applies include/exclude globs (defaults when include is empty).
func selectFiles(paths []string, include, exclude []string) []string {
	var out []string
	for _, p := range paths {
		keep := false
		if len(include) == 0 {
			keep = wantDefault(p)
		}
		for _, g := range include {
			if matchGlob(g, p) {
				keep = true
				break
			}
		}
		for _, g := range exclude {
			if matchGlob(g, p) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

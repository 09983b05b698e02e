package hub

import (
	"testing"
	"unicode/utf8"
)

func FuzzGlob(f *testing.F) {
	for _, s := range []string{"*.safetensors", "[!a]*", "[", "a[]b]", "sub/", `\x`, "??", "[^x]"} {
		f.Add(s, "sub/model.safetensors")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		// Never panics; a literal pattern (no metacharacters) matches itself, and
		// (valid UTF-8) is found by "*" around it.
		matchGlob(pattern, name)
		if !containsAny(pattern, "*?[\\") && !endsWithSlash(pattern) && !matchGlob(pattern, pattern) {
			t.Errorf("literal %q does not match itself", pattern)
		}
		if utf8.ValidString(pattern) && !containsAny(pattern, "*?[\\") && !endsWithSlash(pattern) && !matchGlob("*"+pattern+"*", "a/"+pattern+".json") {
			t.Errorf("*%s* does not match a/%s.json", pattern, pattern)
		}
	})
}

func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes 5-9/*", "bytes -1/2", "bytes 1-", "", "bytes 9223372036854775807-0/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		start, total, ok := parseContentRange(h)
		if ok && (total < -1 || start < 0 || (total >= 0 && start >= total)) {
			t.Errorf("%q: start %d total %d", h, start, total)
		}
	})
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, d := range s {
			if c == d {
				return true
			}
		}
	}
	return false
}

func endsWithSlash(s string) bool { return len(s) > 0 && s[len(s)-1] == '/' }

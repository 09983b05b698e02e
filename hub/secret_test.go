package hub_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/hub/hubtest"
)

// leaks returns the longest run of 8 or more characters of secret found in s, "" if none.
func leaks(secret, s string) string {
	best := ""
	for i := range len(secret) {
		for j := i + 8; j <= len(secret); j++ {
			if len(secret[i:j]) > len(best) && strings.Contains(s, secret[i:j]) {
				best = secret[i:j]
			}
		}
	}
	return best
}

func TestRedact(t *testing.T) {
	const tok = "hf_ECHOsecret0123456789abcdef"
	cases := []struct{ in, want string }{
		{"no secret here", "no secret here"},
		{"Bearer " + tok + " again " + tok, "Bearer *** again ***"},
		{"cut: " + tok[:20], "cut: ***"},
		{"tail: " + tok[9:], "tail: ***"},
		{"short piece " + tok[3:10] + " stays", "short piece " + tok[3:10] + " stays"},
		{"split " + tok[:12] + "|" + tok[12:], "split ***|***"},
		{tok + tok[:8], "***"},
	}
	for _, c := range cases {
		if got := hub.Redact(tok, c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if l := leaks(tok, hub.Redact(tok, c.in)); l != "" {
			t.Errorf("Redact(%q) leaks %q", c.in, l)
		}
	}
	if got := hub.Redact("abc", "xabcx"); got != "x***x" {
		t.Errorf("a short secret: %q", got)
	}
}

// A server that echoes the Authorization header back in each field of its answers:
// no 8-character piece of the token reaches an error or a progress line.
func TestEchoedTokenNeverPrinted(t *testing.T) {
	const tok = "hf_TESTSECRETtoken1234567890" // the test Hub's token (newEnv)
	cases := []hubtest.Fault{
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteAPI, Where: "sha"},
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteAPI, Where: "path"},
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteAPI, Where: "body"},
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteAPI, Where: "message"},
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteHEAD, Path: model, Where: "etag"},
		{Kind: hubtest.FaultEcho, Route: hubtest.RouteHEAD, Path: model, Where: "commit"},
	}
	for _, f := range cases {
		t.Run(f.Where, func(t *testing.T) {
			e := newEnv(t)
			e.srv.Inject(f)
			var progress bytes.Buffer
			_, _, err := e.snapshot(context.Background(), e.client("HF_TOKEN", tok),
				hub.FetchOptions{Include: []string{"*"}, Progress: hub.NewLineProgress(&progress), Workers: 1})
			out := progress.String()
			if err != nil {
				out += "\n" + err.Error()
			} else if f.Where != "path" {
				t.Fatalf("Snapshot succeeded with the token echoed in the %s", f.Where)
			}
			if l := leaks(tok, out); l != "" {
				t.Errorf("%q of the token printed:\n%s", l, out)
			}
			if err != nil && !strings.Contains(err.Error(), "***") {
				t.Errorf("the error shows no redaction (was the echo made?): %v", err)
			}
			t.Logf("echo in the %s: %v", f.Where, err)
		})
	}
}

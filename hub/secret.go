package hub

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Everything that comes from the network passes through send (timeouts.go), and send
// passes it through scrubAnswer: header values, the final URL, transport errors, and
// every body that is not file content. So an echoed token never reaches a message,
// whichever field of an answer (a sha, a listed path, an ETag, an error body) it is put
// in, and text is redacted before any caller cuts it short.

// minSecretRun is the shortest run of a token's characters that is hidden: a message cut
// in the middle of the token shows no part of it this long either.
const minSecretRun = 8

// Redact replaces in s every run of minSecretRun or more characters that occurs in
// secret with "***" (a secret shorter than that, wherever it occurs whole).
func Redact(secret, s string) string {
	if secret == "" || s == "" {
		return s
	}
	if len(secret) < minSecretRun {
		return strings.ReplaceAll(s, secret, "***")
	}
	var hide []bool
	for i := 0; i+minSecretRun <= len(secret); i++ {
		gram := secret[i : i+minSecretRun]
		for off := 0; ; {
			j := strings.Index(s[off:], gram)
			if j < 0 {
				break
			}
			if hide == nil {
				hide = make([]bool, len(s))
			}
			for k := off + j; k < off+j+minSecretRun; k++ {
				hide[k] = true
			}
			off += j + 1
		}
	}
	if hide == nil {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !hide[i] {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString("***")
		for i+1 < len(s) && hide[i+1] {
			i++
		}
	}
	return b.String()
}

func (c *Client) scrub(s string) string { return Redact(c.Token, s) }

// Bodies read whole to be redacted: a listing is a few MB (RevisionInfo bounds it at
// 64 MiB too); an error answer is read for its first bytes only.
const (
	maxScrubbedBody = 64 << 20
	maxErrorBody    = 1 << 20
)

// scrubAnswer redacts the token from an answer before any caller sees it. File content
// (a 2xx download) is left alone: it goes to disk, checked by its hash, never into text.
func (c *Client) scrubAnswer(resp *http.Response, download bool) error {
	if c.Token == "" {
		return nil
	}
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		for k, vs := range h {
			for i, v := range vs {
				h[k][i] = c.scrub(v)
			}
		}
	}
	if r := resp.Request; r != nil && r.URL != nil {
		if s := r.URL.String(); c.scrub(s) != s {
			rc := *r
			if u, err := url.Parse(c.scrub(s)); err == nil {
				rc.URL = u
			} else {
				rc.URL = &url.URL{Scheme: r.URL.Scheme, Host: c.scrub(r.URL.Host), Path: "/***"}
			}
			resp.Request = &rc
		}
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if download && ok {
		return nil
	}
	limit := int64(maxScrubbedBody)
	if !ok {
		limit = maxErrorBody
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	resp.Body.Close()
	if err != nil {
		return err
	}
	b = []byte(c.scrub(string(b)))
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return nil
}

// scrubbedError is a transport error whose text is redacted (a malformed answer is
// quoted in it, a redirect's URL is part of it); errors.Is and As still see the cause.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func (c *Client) scrubErr(err error) error {
	if err == nil || c.Token == "" {
		return err
	}
	if s := err.Error(); c.scrub(s) != s {
		return &scrubbedError{c.scrub(s), err}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = c.scrub(ue.URL)
	}
	return err
}

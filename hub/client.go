package hub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultEndpoint is the public Hub.
const DefaultEndpoint = "https://huggingface.co"

// Client talks to a Hub endpoint. The zero value is not usable; use NewClient.
type Client struct {
	Endpoint  string // no trailing slash
	Token     string // bearer token; never printed
	HTTP      *http.Client
	UserAgent string
	// MaxRetries bounds retries of 5xx, 429 and dropped connections.
	MaxRetries int
	// Backoff returns the wait before retry attempt n (1-based); Retry-After wins.
	Backoff func(n int) time.Duration
	// Offline forbids network access ($HF_HUB_OFFLINE).
	Offline bool
	// IdleTimeout aborts a download whose body sends nothing for this long (then it is
	// resumed like any dropped connection). Zero means DownloadTimeout.
	IdleTimeout time.Duration
	// MetadataTimeout bounds each attempt of a metadata request (API calls, HEAD of a
	// file) from the start of the connection to the answer's headers, and for a request
	// with a body the pause between two sent chunks: $HF_HUB_ETAG_TIMEOUT, as
	// huggingface_hub reads it (constants.py). Zero means DefaultTimeout.
	MetadataTimeout time.Duration
	// DownloadTimeout is the same bound for file downloads, and the default IdleTimeout:
	// $HF_HUB_DOWNLOAD_TIMEOUT. Zero means DefaultTimeout.
	DownloadTimeout time.Duration
	// FileDeadline, when set, replaces the deadline of one file's download (by default
	// two minutes plus its size at MinSpeed); for tests.
	FileDeadline func(size int64) time.Duration
	// Notify, when set, receives one line when an answer is slow in coming, saying
	// what is waited for (the CLI prints it on stderr).
	Notify func(msg string)

	notes *noteState // shared by copies of the client
}

// DefaultTimeout is huggingface_hub's DEFAULT_ETAG_TIMEOUT and DEFAULT_DOWNLOAD_TIMEOUT.
const DefaultTimeout = 10 * time.Second

// maxNoAnswer bounds the attempts of a request that got no answer in its timeout: an
// unresponsive Hub fails in 3 timeouts plus 1.5 s of backoff (31.5 s by default),
// instead of using the whole retry budget meant for errors it answers with.
const maxNoAnswer = 3

// envTimeout reads a timeout variable as huggingface_hub does (_as_int(value) or the
// default): whole seconds; empty, zero or unreadable means the default.
func envTimeout(getenv func(string) string, name string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(getenv(name)))
	if err != nil || n <= 0 {
		return DefaultTimeout
	}
	return time.Duration(n) * time.Second
}

// NewClient builds a client from the environment as huggingface_hub does:
// $HF_ENDPOINT, $HF_TOKEN else the token file ($HF_TOKEN_PATH, else $HF_HOME/token),
// $HF_HUB_OFFLINE. getenv is os.Getenv in production.
func NewClient(getenv func(string) string) *Client {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &Client{
		Endpoint:   strings.TrimRight(cmp.Or(getenv("HF_ENDPOINT"), DefaultEndpoint), "/"),
		Token:      readToken(getenv),
		UserAgent:  "xpuinject",
		MaxRetries: 5,
		Backoff: func(n int) time.Duration {
			d := 500 * time.Millisecond << (n - 1)
			if d > 16*time.Second {
				d = 16 * time.Second
			}
			return d
		},
		// constants.py: HF_HUB_OFFLINE = _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)
		Offline:         isTrue(cmp.Or(getenv("HF_HUB_OFFLINE"), getenv("TRANSFORMERS_OFFLINE"))),
		MetadataTimeout: envTimeout(getenv, "HF_HUB_ETAG_TIMEOUT"),
		DownloadTimeout: envTimeout(getenv, "HF_HUB_DOWNLOAD_TIMEOUT"),
		notes:           &noteState{},
	}
	// Connect and header waits are bounded per attempt by Do (timeouts.go); the dialer's
	// own limit only backs that up.
	c.HTTP = &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: max(c.MetadataTimeout, c.DownloadTimeout), KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: max(c.MetadataTimeout, c.DownloadTimeout),
			IdleConnTimeout:     90 * time.Second,
			MaxIdleConnsPerHost: 16,
		},
	}
	return c
}

// isTrue follows huggingface_hub's _is_true (constants.py): "1", "ON", "YES", "TRUE".
func isTrue(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func readToken(getenv func(string) string) string {
	// utils/_auth.py: HF_TOKEN, then the legacy HUGGING_FACE_HUB_TOKEN, then the file.
	if t := strings.TrimSpace(cmp.Or(getenv("HF_TOKEN"), getenv("HUGGING_FACE_HUB_TOKEN"))); t != "" {
		return t
	}
	path := expandPath(getenv("HF_TOKEN_PATH"), getenv)
	if path == "" {
		path = filepath.Join(hfHome(getenv), "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ErrOffline is returned when a request is attempted in offline mode.
var ErrOffline = errors.New("hub: offline mode (HF_HUB_OFFLINE is set)")

// StatusError is a non-2xx answer. Its message never contains the token.
type StatusError struct {
	Method, URL string
	Status      int
	Body        string // first bytes of the body, for the message
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("hub: %s %s: HTTP %d", e.Method, e.URL, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Do sends req with auth and user agent, retrying 5xx, 429 and dropped connections
// with backoff (Retry-After honoured). A request with a body is retried only if it
// has GetBody. The caller closes the response body. Non-2xx answers that are not
// retried, or that persist, are returned as the response (err nil) for the caller
// to interpret, except after exhausting retries on a retryable status, which
// returns *StatusError.
func (c *Client) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	if c.Offline {
		return nil, ErrOffline
	}
	req = req.WithContext(ctx)
	// The token goes to the Hub endpoint only, never to a CDN or storage host a
	// download or upload is redirected to (as huggingface_hub drops "authorization" for
	// off-Hub locations: file_download.py, _get_metadata_or_catch_error).
	if c.Token != "" && req.Header.Get("Authorization") == "" && c.isHubHost(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	wait := c.waitFor(ctx)
	noAnswer := 0
	for attempt := 0; ; attempt++ {
		if attempt > 0 && req.Body != nil {
			if req.GetBody == nil {
				return nil, fmt.Errorf("hub: %s %s: cannot retry a request whose body cannot be replayed", req.Method, redactURL(req.URL))
			}
			b, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = b
		}
		resp, err := c.send(ctx, req, wait, attempt)
		var pause time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if why := noNetwork(err); why != "" {
				// Retries are for answers and dropped connections; a name that does not
				// resolve or a port nobody listens on will not change in seconds.
				return nil, &UnreachableError{Host: req.URL.Host, Why: why, Err: err}
			}
			if errors.Is(err, errNoAnswer) {
				if noAnswer++; noAnswer >= maxNoAnswer || attempt >= c.MaxRetries {
					return nil, fmt.Errorf("hub: %s %s: no answer within %s (%s), %d attempts: %w",
						req.Method, redactURL(req.URL), wait.d, wait.env, attempt+1, err)
				}
				pause = c.Backoff(attempt + 1)
				break
			}
			if attempt >= c.MaxRetries {
				var ue *url.Error
				if errors.As(err, &ue) {
					ue.URL = redactURL(req.URL) // url.Error prints the URL, query included
				}
				return nil, fmt.Errorf("hub: %s %s: %w", req.Method, redactURL(req.URL), err)
			}
			pause = c.Backoff(attempt + 1)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if attempt >= c.MaxRetries {
				return nil, &StatusError{Method: req.Method, URL: redactURL(req.URL), Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
			}
			pause = c.Backoff(attempt + 1)
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && ra >= 0 {
				pause = min(time.Duration(ra)*time.Second, maxRetryAfter)
			}
		default:
			return resp, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// UnreachableError is a Hub (or a host a download is sent to) that cannot be reached
// at all: its name does not resolve, or its port refuses connections.
type UnreachableError struct {
	Host, Why string
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("hub: %s cannot be reached (%s); HF_HUB_OFFLINE=1 uses the cache", e.Host, e.Why)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// noNetwork says why err means no network path to the host ("" when it does not): a
// failed name resolution, a refused connection, no route.
func noNetwork(err error) string {
	var de *net.DNSError
	switch {
	case errors.As(err, &de):
		return "name lookup: " + de.Err
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "no route"
	}
	return ""
}

// maxRetryAfter bounds a server's Retry-After so a bad header cannot park a fetch for hours.
const maxRetryAfter = 2 * time.Minute

// isHubHost reports whether u is on the endpoint's host (or huggingface.co).
func (c *Client) isHubHost(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	if ep, err := url.Parse(c.Endpoint); err == nil && strings.ToLower(ep.Hostname()) == h {
		return true
	}
	return h == "huggingface.co" || h == "hf.co"
}

// redactURL is the URL for messages: no password and no query (a signed CDN or
// storage URL carries its credentials in the query).
func redactURL(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	c.ForceQuery = false
	return c.Redacted()
}

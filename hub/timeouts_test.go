package hub

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentHub accepts connections and reads requests but never answers until the test ends.
func silentHub(t *testing.T) *httptest.Server {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// TestSilentHubFailsFast: a Hub that never answers fails a metadata request after three
// attempts of HF_HUB_ETAG_TIMEOUT each, saying so, with one notice on the way.
func TestSilentHubFailsFast(t *testing.T) {
	srv := silentHub(t)
	env := map[string]string{"HF_ENDPOINT": srv.URL, "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "30"}
	c := NewClient(func(k string) string { return env[k] })
	var notes lines
	c.Notify = notes.add
	start := time.Now()
	_, err := c.RevisionInfo(context.Background(), "model", "org/name", "main")
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "no answer within 1s (HF_HUB_ETAG_TIMEOUT), 3 attempts") {
		t.Fatalf("error %v", err)
	}
	if !isUnreachable(err) {
		t.Errorf("a silent Hub is not unreachable for the cache fallback: %v", err)
	}
	// 3 × 1 s + 0.5 s + 1 s of backoff
	if took < 4*time.Second || took > 8*time.Second {
		t.Errorf("took %s, want about 4.5 s", took)
	}
	n := notes.get()
	if len(n) != 1 || !strings.Contains(n[0], "waiting for "+strings.TrimPrefix(srv.URL, "http://")+" to answer GET ") ||
		!strings.Contains(n[0], "/api/models/org/name/revision/main") || !strings.Contains(n[0], "HF_HUB_ETAG_TIMEOUT") {
		t.Errorf("notices %q, want one naming the request and the variable", n)
	}
}

// TestSilentHubDownloadTimeout: downloads are bounded by HF_HUB_DOWNLOAD_TIMEOUT.
func TestSilentHubDownloadTimeout(t *testing.T) {
	srv := silentHub(t)
	env := map[string]string{"HF_ENDPOINT": srv.URL, "HF_HUB_ETAG_TIMEOUT": "30", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
	c := NewClient(func(k string) string { return env[k] })
	if c.DownloadTimeout != time.Second || c.MetadataTimeout != 30*time.Second {
		t.Fatalf("timeouts %s, %s from the environment", c.DownloadTimeout, c.MetadataTimeout)
	}
	c.DownloadTimeout = 200 * time.Millisecond // the variable takes whole seconds; be quick
	c.Backoff = func(int) time.Duration { return 0 }
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/org/name/resolve/main/model.safetensors", nil)
	start := time.Now()
	_, err := c.Do(withKind(context.Background(), kindDownload), req)
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms (HF_HUB_DOWNLOAD_TIMEOUT)") {
		t.Fatalf("error %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s", took)
	}
}

// TestDefaultsBoundASilentHub: with no variables set, a silent Hub costs at most 3 ×
// 10 s + backoff, within the minute a user would wait.
func TestDefaultsBoundASilentHub(t *testing.T) {
	c := NewClient(func(string) string { return "" })
	w := c.waitFor(context.Background())
	var backoff time.Duration
	for n := 1; n < maxNoAnswer; n++ {
		backoff += c.Backoff(n)
	}
	if total := time.Duration(maxNoAnswer)*w.d + backoff; w.d != 10*time.Second || total > 60*time.Second {
		t.Errorf("metadata wait %s, worst case %s", w.d, total)
	}
	if d := c.waitFor(withKind(context.Background(), kindDownload)).d; d != 10*time.Second {
		t.Errorf("download wait %s", d)
	}
	for _, v := range []string{"abc", "0", "-3", "1.5"} {
		c := NewClient(func(k string) string {
			if k == "HF_HUB_ETAG_TIMEOUT" {
				return v
			}
			return ""
		})
		if c.MetadataTimeout != DefaultTimeout {
			t.Errorf("HF_HUB_ETAG_TIMEOUT=%q gives %s, want the default", v, c.MetadataTimeout)
		}
	}
}

// slowBody sends its bytes in chunks spaced by gap.
type slowBody struct {
	chunks int
	gap    time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.chunks == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.gap)
	b.chunks--
	p[0] = 'x'
	return 1, nil
}

// TestMovingUploadNotCut: the attempt timer restarts with each chunk of a request body,
// so an upload longer than the timeout that keeps moving completes.
func TestMovingUploadNotCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(bytes.ToUpper(b))
	}))
	defer srv.Close()
	c := NewClient(func(k string) string { return map[string]string{"HF_ENDPOINT": srv.URL}[k] })
	c.MetadataTimeout = 300 * time.Millisecond
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/upload", &slowBody{chunks: 5, gap: 150 * time.Millisecond})
	resp, err := c.Do(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "XXXXX" {
		t.Errorf("answer %q", b)
	}
}

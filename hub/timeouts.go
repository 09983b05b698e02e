package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A Hub that accepts connections and never answers must not hold a command for
// minutes: each attempt of a request has a timer, started with the request and
// restarted by every chunk of its body the transport sends, that cancels the attempt
// when it fires before the answer's headers arrive. Metadata requests use
// MetadataTimeout ($HF_HUB_ETAG_TIMEOUT), downloads DownloadTimeout
// ($HF_HUB_DOWNLOAD_TIMEOUT); a commit, which the Hub may take a while to apply, waits
// at least commitTimeout for its answer.

// errNoAnswer is the cause of an attempt cancelled by its timer.
var errNoAnswer = errors.New("no answer from the Hub")

// commitTimeout is the least wait for a commit's answer once its body is sent.
const commitTimeout = 2 * time.Minute

type requestKind int

const (
	kindMetadata requestKind = iota
	kindDownload
	kindCommit
)

type kindKey struct{}

// withKind marks the requests made with ctx as downloads or commits.
func withKind(ctx context.Context, k requestKind) context.Context {
	return context.WithValue(ctx, kindKey{}, k)
}

// wait is the bound of one attempt and where it comes from, for messages.
type wait struct {
	d   time.Duration
	env string
}

func (c *Client) waitFor(ctx context.Context) wait {
	k, _ := ctx.Value(kindKey{}).(requestKind)
	meta := c.MetadataTimeout
	if meta <= 0 {
		meta = DefaultTimeout
	}
	switch k {
	case kindDownload:
		d := c.DownloadTimeout
		if d <= 0 {
			d = DefaultTimeout
		}
		return wait{d, "HF_HUB_DOWNLOAD_TIMEOUT"}
	case kindCommit:
		return wait{max(meta, commitTimeout), "commit"}
	}
	return wait{meta, "HF_HUB_ETAG_TIMEOUT"}
}

// noteState throttles the slow-answer notices of a client and its copies.
type noteState struct{ last atomic.Int64 }

// noteAfter is how long an attempt waits before saying that it waits.
const noteAfter = 3 * time.Second

// send makes one attempt of req under w. A response's body keeps the attempt's context
// until it is closed.
func (c *Client) send(ctx context.Context, req *http.Request, w wait, attempt int) (*http.Response, error) {
	actx, cancel := context.WithCancelCause(ctx)
	tm := &attemptTimer{d: w.d, cancel: cancel}
	tm.arm()
	after := min(noteAfter, w.d/2)
	noted := make(chan struct{})
	note := time.AfterFunc(after, func() {
		defer close(noted)
		if c.Notify == nil {
			return
		}
		now := time.Now().UnixNano()
		if c.notes != nil {
			last := c.notes.last.Load()
			if now-last < int64(5*time.Second) || !c.notes.last.CompareAndSwap(last, now) {
				return
			}
		}
		again := ""
		if attempt > 0 {
			again = fmt.Sprintf(" (attempt %d of %d)", attempt+1, maxNoAnswer)
		}
		c.Notify(fmt.Sprintf("hub: waiting for %s to answer %s %s%s: nothing for %s; giving up after %s (%s)",
			req.URL.Host, req.Method, redactURL(req.URL), again, after, w.d, w.env))
	})
	// A notice already under way finishes before send returns, so it never interleaves
	// with what the caller writes next.
	defer func() {
		if !note.Stop() {
			<-noted
		}
	}()
	r := req.WithContext(actx)
	if req.Body != nil && req.Body != http.NoBody {
		r.Body = &rearmingBody{ReadCloser: req.Body, t: tm}
	}
	resp, err := c.HTTP.Do(r)
	tm.stop() // the answer's headers are in (or the attempt failed): the body has its own bounds
	noAnswer := context.Cause(actx) == errNoAnswer && ctx.Err() == nil
	if err != nil || noAnswer {
		if resp != nil {
			resp.Body.Close() // the timer fired as the headers came: the body is cut off anyway
		}
		cancel(nil)
		if noAnswer {
			return nil, errNoAnswer
		}
		return nil, c.scrubErr(err)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	// The one place answers enter: the token is redacted from them here (secret.go).
	k, _ := ctx.Value(kindKey{}).(requestKind)
	if err := c.scrubAnswer(resp, k == kindDownload); err != nil {
		resp.Body.Close()
		return nil, c.scrubErr(err)
	}
	return resp, nil
}

// attemptTimer cancels an attempt when it fires; arm restarts it.
type attemptTimer struct {
	mu      sync.Mutex
	d       time.Duration
	t       *time.Timer
	stopped bool
	cancel  context.CancelCauseFunc
}

func (a *attemptTimer) arm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	if a.t == nil {
		a.t = time.AfterFunc(a.d, func() { a.cancel(errNoAnswer) })
		return
	}
	a.t.Reset(a.d)
}

func (a *attemptTimer) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	if a.t != nil {
		a.t.Stop()
	}
}

// rearmingBody restarts the attempt's timer on every chunk the transport reads: a
// large upload that moves is not cut off; one that stalls is.
type rearmingBody struct {
	io.ReadCloser
	t *attemptTimer
}

func (b *rearmingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.t.arm()
	return n, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

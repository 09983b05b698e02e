package hub_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/hub/hubtest"
)

// A server that misbehaves forever must not hold a download forever: every case ends
// in an error that names the file and says what the server did, within a bounded
// number of requests, and no partial ever holds more than the file's stated size.
func TestMisbehavingServerEnds(t *testing.T) {
	size := int64(len(fixtureFiles()[model].Data))
	cases := []struct {
		name     string
		faults   []hubtest.Fault
		deadline time.Duration // FileDeadline, when set
		want     []string
		maxGETs  int
	}{
		{name: "200 to every Range, each answer short",
			faults: []hubtest.Fault{{Kind: hubtest.FaultShortWhole, Path: model, After: 4096, Count: -1}},
			want:   []string{"hub: " + model, "ignored Range", "3 restarts from byte 0, giving up", "ended after byte 4096 of 700000"},
			// a first answer, then one per restart
			maxGETs: 4},
		{name: "a stated size of 10 TB, the listing says 700 kB",
			faults:  []hubtest.Fault{{Kind: hubtest.FaultStatedSize, Route: hubtest.RouteHEAD, Path: model, Size: 10e12}},
			want:    []string{"hub: org/tiny@", model, "states 10000000000000 bytes, the repository listing 700000; refused before downloading"},
			maxGETs: 0},
		{name: "a stated size of 10 TB in the listing and the HEAD",
			faults: []hubtest.Fault{
				{Kind: hubtest.FaultStatedSize, Route: hubtest.RouteHEAD, Path: model, Size: 10e12},
				{Kind: hubtest.FaultStatedSize, Route: hubtest.RouteAPI, Path: model, Size: 10e12}},
			want:    []string{"hub: " + model + ": the server states 10.0 TB (10000000000000 bytes)", "free; refused before downloading"},
			maxGETs: 0},
		{name: "a few bytes per connection, past the file's deadline",
			faults:   []hubtest.Fault{{Kind: hubtest.FaultCut, Path: model, After: 1000, Count: -1}},
			deadline: 1500 * time.Millisecond,
			want:     []string{"hub: " + model + ": not complete after 1.5s, the most allowed for 700.0 kB", "resumes next time"},
			maxGETs:  1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, f := range tc.faults {
				e.srv.Inject(f)
			}
			c := e.client()
			c.Backoff = func(int) time.Duration { return time.Millisecond }
			if tc.deadline > 0 {
				c.FileDeadline = func(int64) time.Duration { return tc.deadline }
			}
			// The largest partial seen while the download runs.
			partial := filepath.Join(e.cache.Dir, "models--org--tiny", "blobs", e.files[model].SHA256()+".incomplete")
			stop, biggest := make(chan struct{}), make(chan int64)
			go func() {
				var most int64
				for {
					if st, err := os.Stat(partial); err == nil && st.Size() > most {
						most = st.Size()
					}
					select {
					case <-stop:
						biggest <- most
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Now()
			_, _, err := e.snapshot(ctx, c, hub.FetchOptions{Workers: 1})
			took := time.Since(t0)
			close(stop)
			most := <-biggest
			if err == nil {
				t.Fatal("Snapshot succeeded against a server that never sends the file")
			}
			if ctx.Err() != nil {
				t.Fatalf("still downloading after %s: %v", took, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			gets := e.srv.Requests(hubtest.RouteContent, model)
			if gets > tc.maxGETs {
				t.Errorf("%d GETs of %s, want at most %d", gets, model, tc.maxGETs)
			}
			if most > size {
				t.Errorf("the partial reached %d bytes, more than the stated %d", most, size)
			}
			t.Logf("%s: ended in %s after %d GETs, largest partial %d bytes: %v", tc.name, took.Round(time.Millisecond), gets, most, err)
		})
	}
}

// The partial never holds a byte past the stated size, even for one answer: a body
// longer than announced is cut at the size and discarded.
func TestTooLongBodyNeverWritten(t *testing.T) {
	e := newEnv(t)
	e.srv.Inject(hubtest.Fault{Kind: hubtest.FaultTooLong, Path: model, Count: -1})
	_, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{Workers: 1})
	if !errors.Is(err, hub.ErrChecksum) || !strings.Contains(err.Error(), "more than the announced 700000 bytes") {
		t.Fatalf("error %v, want the announced size named", err)
	}
	_, partials := checkCache(t, e)
	if n := partials[e.files[model].SHA256()]; n != 0 {
		t.Errorf("a partial of %d bytes is left", n)
	}
}

// No network is not a fault to retry: a name that does not resolve or a refused port
// fails at once, in one line that says so and how to run from the cache.
func TestNoNetworkFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	cases := []struct {
		name, endpoint string
		dial           func(ctx context.Context, network, addr string) (net.Conn, error)
		want           string
	}{
		{name: "refused port", endpoint: refused, want: "(connection refused)"},
		{name: "resolver failure", endpoint: "http://hub.example.invalid",
			dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "hub.example.invalid", IsNotFound: true}}
			},
			want: "(name lookup: no such host)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := hub.NewClient(func(k string) string {
				return map[string]string{"HF_ENDPOINT": tc.endpoint, "HF_HOME": t.TempDir()}[k]
			})
			c.Backoff = func(int) time.Duration { return time.Second } // a retry would show in the time
			if tc.dial != nil {
				c.HTTP = &http.Client{Transport: &http.Transport{DialContext: tc.dial}}
			}
			t0 := time.Now()
			_, _, err := c.Snapshot(context.Background(), hub.Cache{Dir: t.TempDir()}, hub.Ref{Repo: "meta-llama/Llama-3.2-1B"}, hub.FetchOptions{})
			took := time.Since(t0)
			if err == nil {
				t.Fatal("Snapshot succeeded without a network")
			}
			if took > 500*time.Millisecond {
				t.Errorf("took %s: retried a missing network", took)
			}
			for _, w := range []string{tc.want, "cannot be reached", "not cached", "HF_HUB_OFFLINE=1 uses the cache"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if !errors.Is(err, hub.ErrNotCached) {
				t.Errorf("error %v is not ErrNotCached", err)
			}
			if tc.name == "refused port" && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %v does not wrap ECONNREFUSED", err)
			}
			t.Logf("%s: %s: %v", tc.name, took.Round(time.Millisecond), err)
		})
	}
}

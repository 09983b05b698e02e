package hubtest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// Server is the test Hub: an http.Handler over a Store.
// Download-side routes are registered in download.go (registerDownload), publish-side
// routes in publish.go (registerPublish); each file owns its protocol.
type Server struct {
	Store *Store
	// Token, when set, is the only bearer token accepted for private/gated repos and
	// for every write.
	Token string
	// CDNHost, when set, is the host[:port] LFS downloads are redirected to; by default
	// the same listener under another host name (see download.go).
	CDNHost string
	// Rate, when positive, limits file content to about that many bytes per second.
	Rate int64
	mux  *http.ServeMux

	once sync.Once
	fs   *faultState
	down atomic.Bool // set by FaultDown: every connection is dropped
}

// New returns a server over store (a new empty store when nil).
func New(store *Store) *Server {
	if store == nil {
		store = NewStore()
	}
	s := &Server{Store: store, mux: http.NewServeMux()}
	s.registerDownload(s.mux)
	s.registerPublish(s.mux)
	return s
}

// ServeHTTP answers the download routes (download.go: serveDownload, dispatched by hand
// because their path shapes overlap in http.ServeMux), then everything else through
// the mux (publish routes).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.serveDownload(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Start runs the server on a loopback port (httptest); Close it when done.
func (s *Server) Start() *httptest.Server { return httptest.NewServer(s) }

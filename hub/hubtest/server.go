package hubtest

import (
	"net/http"
	"net/http/httptest"
)

// Server is the test Hub: an http.Handler over a Store.
// Download-side routes are registered in download.go (registerDownload), publish-side
// routes in publish.go (registerPublish); each file owns its protocol.
type Server struct {
	Store *Store
	// Token, when set, is the only bearer token accepted for private/gated repos and
	// for every write.
	Token string
	mux   *http.ServeMux
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

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start runs the server on a loopback port (httptest); Close it when done.
func (s *Server) Start() *httptest.Server { return httptest.NewServer(s) }

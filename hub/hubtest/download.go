package hubtest

import "net/http"

// registerDownload mounts the resolve / HEAD / revision-info routes.
func (s *Server) registerDownload(mux *http.ServeMux) {}

package hubtest

import "net/http"

// registerPublish mounts the repo-create / branch / preupload / commit / LFS routes.
func (s *Server) registerPublish(mux *http.ServeMux) {}

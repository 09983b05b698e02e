package hub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A server that echoes the Authorization header back (in the body and the error
// message header) must not get the token into our errors.
func TestTokenNeverInErrors(t *testing.T) {
	const tok = "hf_ECHOsecret0123456789"
	for _, status := range []int{401, 403, 404, 500} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Error-Message", "bad "+r.Header.Get("Authorization"))
			w.WriteHeader(status)
			w.Write([]byte("you sent " + r.Header.Get("Authorization")))
		}))
		c := NewClient(func(k string) string {
			return map[string]string{"HF_ENDPOINT": srv.URL, "HF_TOKEN": tok}[k]
		})
		c.MaxRetries, c.Backoff = 1, func(int) time.Duration { return time.Millisecond }
		_, err := c.RevisionInfo(context.Background(), "model", "org/x", "main")
		if err == nil || strings.Contains(err.Error(), tok) {
			t.Errorf("status %d: error %v", status, err)
		}
		if status == 401 && !errors.Is(err, ErrAuth) {
			t.Errorf("401: %v is not ErrAuth", err)
		}
		_, err = c.FileMetadata(context.Background(), "model", "org/x", "main", "config.json")
		if err == nil || strings.Contains(err.Error(), tok) {
			t.Errorf("HEAD status %d: error %v", status, err)
		}
		srv.Close()
	}
}

// The token goes to the endpoint host only.
func TestTokenOnlyToTheHub(t *testing.T) {
	var cdnAuth, hubAuth string
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cdnAuth = r.Header.Get("Authorization") }))
	defer cdn.Close()
	hubSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hubAuth = r.Header.Get("Authorization") }))
	defer hubSrv.Close()
	// Both listen on 127.0.0.1: name the CDN "localhost" so the hosts differ.
	cdnURL := strings.Replace(cdn.URL, "127.0.0.1", "localhost", 1)
	c := NewClient(func(k string) string { return map[string]string{"HF_ENDPOINT": hubSrv.URL, "HF_TOKEN": "hf_x"}[k] })
	for _, u := range []string{hubSrv.URL, cdnURL} {
		req, _ := http.NewRequest("GET", u, nil)
		resp, err := c.Do(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if hubAuth != "Bearer hf_x" || cdnAuth != "" {
		t.Errorf("hub got %q, cdn got %q", hubAuth, cdnAuth)
	}
}

func TestEnvironment(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HF_HOME": home, "TRANSFORMERS_OFFLINE": "1", "HF_ENDPOINT": "http://h:1/"}
	c := NewClient(func(k string) string { return env[k] })
	if !c.Offline || c.Endpoint != "http://h:1" || c.Token != "" {
		t.Errorf("client %+v", c)
	}
	if got := CacheFromEnv(func(k string) string { return env[k] }).Dir; got != home+"/hub" {
		t.Errorf("cache %s", got)
	}
	env["HUGGINGFACE_HUB_CACHE"] = "/legacy"
	if got := CacheFromEnv(func(k string) string { return env[k] }).Dir; got != "/legacy" {
		t.Errorf("legacy cache %s", got)
	}
	env["HF_HUB_CACHE"] = "$BASE/x/${NAME}"
	env["BASE"], env["NAME"] = "/b", "c"
	if got := CacheFromEnv(func(k string) string { return env[k] }).Dir; got != "/b/x/c" {
		t.Errorf("cache %s", got)
	}
	os.WriteFile(filepath.Join(home, "tok"), []byte(" hf_file \n"), 0o600)
	env["HF_TOKEN_PATH"] = "$HF_HOME/tok"
	if c := NewClient(func(k string) string { return env[k] }); c.Token != "hf_file" {
		t.Errorf("token from HF_TOKEN_PATH: %q", c.Token)
	}
	env["HUGGING_FACE_HUB_TOKEN"] = "hf_legacy"
	if c := NewClient(func(k string) string { return env[k] }); c.Token != "hf_legacy" {
		t.Errorf("legacy token: %q", c.Token)
	}
	env["HF_TOKEN"] = "hf_new"
	if c := NewClient(func(k string) string { return env[k] }); c.Token != "hf_new" {
		t.Errorf("HF_TOKEN: %q", c.Token)
	}
}

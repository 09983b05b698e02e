package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Git LFS upload through the Hub's batch API, as huggingface_hub's lfs.py does
// (post_lfs_batch_info, lfs_upload, _upload_single_part, _upload_multi_part) on top of
// the git-lfs batch protocol (git-lfs docs/api/batch.md).

// lfsMediaType is the batch API's media type (lfs.py LFS_HEADERS).
const lfsMediaType = "application/vnd.git-lfs+json"

// lfsBatchChunk is how many objects one batch request carries
// (_commit_api.py UPLOAD_BATCH_MAX_NUM_FILES).
const lfsBatchChunk = 256

type lfsAction struct {
	Href   string         `json:"href"`
	Header map[string]any `json:"header"`
}

type lfsBatchObject struct {
	Oid     string `json:"oid"`
	Size    int64  `json:"size"`
	Actions *struct {
		Upload *lfsAction `json:"upload"`
		Verify *lfsAction `json:"verify"`
	} `json:"actions"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// lfsBatchURL is {endpoint}/{prefix}{repo}.git/info/lfs/objects/batch with the repo
// type's URL prefix, "kernels/" for kernels and none for models (lfs.py
// post_lfs_batch_info, constants.py REPO_TYPES_URL_PREFIXES).
func (p *pusher) lfsBatchURL() string {
	prefix := ""
	if p.repoType != repoTypeModel {
		prefix = p.segment() + "/"
	}
	return p.c.Endpoint + "/" + prefix + p.repo + ".git/info/lfs/objects/batch"
}

// uploadLFS uploads the content of files (all in LFS mode) before the commit that
// names them: one batch request per chunk, then per object a PUT (or multipart PUTs
// and a completion POST) and the verify POST when the server asks for one.
func (p *pusher) uploadLFS(ctx context.Context, rev string, files []PackageFile) error {
	for start := 0; start < len(files); start += lfsBatchChunk {
		chunk := files[start:min(start+lfsBatchChunk, len(files))]
		byOid := map[string]PackageFile{}
		type obj struct {
			Oid  string `json:"oid"`
			Size int64  `json:"size"`
		}
		objs := []obj{}
		for _, f := range chunk {
			oid := f.SHA256()
			if _, dup := byOid[oid]; dup {
				continue // same content twice: one object
			}
			byOid[oid] = f
			objs = append(objs, obj{Oid: oid, Size: f.Size()})
		}
		body, _ := json.Marshal(map[string]any{
			"operation": "upload",
			"transfers": []string{"basic", "multipart"},
			"objects":   objs,
			"hash_algo": "sha256",
			"ref":       map[string]string{"name": rev},
		})
		resp, b, err := p.send(ctx, http.MethodPost, p.lfsBatchURL(), lfsMediaType, body, map[string]string{"Accept": lfsMediaType})
		if err != nil {
			return err
		}
		if !ok2xx(resp) {
			return fmt.Errorf("hub: LFS batch request for %s: %w", p.repo, p.statusError(resp, b))
		}
		var ans struct {
			Objects []lfsBatchObject `json:"objects"`
		}
		if err := json.Unmarshal(b, &ans); err != nil || ans.Objects == nil {
			return fmt.Errorf("hub: LFS batch answer for %s is malformed (want {\"objects\": [...]})", p.repo)
		}
		var errs []string
		for _, o := range ans.Objects {
			f, ok := byOid[o.Oid]
			if !ok || o.Size != f.Size() {
				return fmt.Errorf("hub: LFS batch answer for %s names object %s (size %d) that was not asked for", p.repo, o.Oid, o.Size)
			}
			if o.Error != nil {
				errs = append(errs, fmt.Sprintf("%s (oid %s): %d %s", f.Path, o.Oid, o.Error.Code, o.Error.Message))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("hub: LFS batch API refused objects: %s", strings.Join(errs, "; "))
		}
		for _, o := range ans.Objects {
			if err := p.lfsTransfer(ctx, byOid[o.Oid], o); err != nil {
				return err
			}
		}
	}
	return nil
}

// lfsTransfer uploads one object as the batch answer says. No actions means the
// Hub already has the content (lfs.py lfs_upload step 0).
func (p *pusher) lfsTransfer(ctx context.Context, f PackageFile, o lfsBatchObject) error {
	if o.Actions == nil || o.Actions.Upload == nil {
		fmt.Fprintf(p.log, "lfs: %s already on the Hub\n", f.Path)
		return nil
	}
	up := o.Actions.Upload
	if up.Href == "" {
		return fmt.Errorf("hub: LFS batch answer for %s has an upload action without href", f.Path)
	}
	href := p.fixEndpoint(up.Href)
	if cs, ok := up.Header["chunk_size"]; ok {
		chunk, err := strconv.ParseInt(fmt.Sprint(cs), 10, 64)
		if err != nil || chunk <= 0 {
			return fmt.Errorf("hub: LFS batch answer for %s: chunk_size %v is not a positive integer", f.Path, cs)
		}
		if err := p.lfsMultipart(ctx, f, href, up.Header, chunk); err != nil {
			return err
		}
	} else if err := p.lfsBasic(ctx, f, href, up.Header); err != nil {
		return err
	}
	if v := o.Actions.Verify; v != nil {
		if v.Href == "" {
			return fmt.Errorf("hub: LFS batch answer for %s has a verify action without href", f.Path)
		}
		body, _ := json.Marshal(map[string]any{"oid": f.SHA256(), "size": f.Size()})
		resp, b, err := p.storage(v.Href).send(ctx, http.MethodPost, p.fixEndpoint(v.Href), lfsMediaType, body, map[string]string{"Accept": lfsMediaType})
		if err != nil {
			return fmt.Errorf("hub: verifying LFS upload of %s: %w", f.Path, err)
		}
		if !ok2xx(resp) {
			return fmt.Errorf("hub: verifying LFS upload of %s: %w", f.Path, p.statusError(resp, b))
		}
	}
	fmt.Fprintf(p.log, "lfs: uploaded %s (%d bytes)\n", f.Path, f.Size())
	return nil
}

// lfsBasic is the "basic" transfer: one PUT of the whole content. The action's header
// entries are applied (git-lfs batch.md); our token is not sent (huggingface_hub PUTs
// to the storage URL without it, lfs.py _upload_single_part).
func (p *pusher) lfsBasic(ctx context.Context, f PackageFile, href string, header map[string]any) error {
	hdr := map[string]string{}
	for k, v := range header {
		hdr[k] = fmt.Sprint(v)
	}
	resp, b, err := p.anonymous().sendFrom(ctx, http.MethodPut, href, "application/octet-stream", f.open(0, f.Size()), f.Size(), hdr)
	if err != nil {
		return fmt.Errorf("hub: uploading LFS object for %s: %w", f.Path, err)
	}
	if !ok2xx(resp) {
		return fmt.Errorf("hub: uploading LFS object for %s: %w", f.Path, p.statusError(resp, b))
	}
	return nil
}

// lfsMultipart is the Hub's "multipart" transfer (lfs.py _upload_multi_part): the
// header holds chunk_size and one presigned URL per part, keyed by the zero-padded part
// number; each part is PUT, its ETag kept, and the completion POSTed to href as
// {"oid","parts":[{"partNumber","etag"}]}.
func (p *pusher) lfsMultipart(ctx context.Context, f PackageFile, href string, header map[string]any, chunk int64) error {
	type part struct {
		n   int
		url string
	}
	var parts []part
	for k, v := range header {
		n, err := strconv.Atoi(k)
		if err != nil || k == "" || strings.TrimLeft(k, "0123456789") != "" {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("hub: LFS multipart answer for %s: part %s URL is not a string", f.Path, k)
		}
		parts = append(parts, part{n, p.fixEndpoint(s)})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	size := f.Size()
	if want := (size + chunk - 1) / chunk; int64(len(parts)) != want {
		return fmt.Errorf("hub: LFS multipart answer for %s: %d part URLs for %d bytes in %d-byte chunks (want %d)", f.Path, len(parts), size, chunk, want)
	}
	type done struct {
		PartNumber int    `json:"partNumber"`
		Etag       string `json:"etag"`
	}
	var completed []done
	anon := p.anonymous()
	for i, pt := range parts {
		lo := int64(i) * chunk
		hi := min(lo+chunk, size)
		resp, b, err := anon.sendFrom(ctx, http.MethodPut, pt.url, "", f.open(lo, hi-lo), hi-lo, nil)
		if err != nil {
			return fmt.Errorf("hub: uploading part %d of %s: %w", i+1, f.Path, err)
		}
		if !ok2xx(resp) {
			return fmt.Errorf("hub: uploading part %d of %s: %w", i+1, f.Path, p.statusError(resp, b))
		}
		etag := resp.Header.Get("ETag")
		if etag == "" {
			return fmt.Errorf("hub: uploading part %d of %s: no ETag in the answer", i+1, f.Path)
		}
		completed = append(completed, done{PartNumber: i + 1, Etag: etag})
	}
	body, _ := json.Marshal(map[string]any{"oid": f.SHA256(), "parts": completed})
	resp, b, err := anon.send(ctx, http.MethodPost, href, lfsMediaType, body, map[string]string{"Accept": lfsMediaType})
	if err != nil {
		return fmt.Errorf("hub: completing multipart upload of %s: %w", f.Path, err)
	}
	if !ok2xx(resp) {
		return fmt.Errorf("hub: completing multipart upload of %s: %w", f.Path, p.statusError(resp, b))
	}
	return nil
}

// anonymous is the pusher without the token, for storage URLs.
func (p *pusher) anonymous() *pusher {
	c := *p.c
	c.Token = ""
	return &pusher{c: &c, repo: p.repo, repoType: p.repoType, log: p.log}
}

// storage picks the pusher for an LFS action URL: with the token only when the URL is
// on the Hub endpoint's own host (huggingface_hub sends it to the verify URL, which the
// Hub serves itself); never to another host.
func (p *pusher) storage(href string) *pusher {
	hu, err1 := url.Parse(p.fixEndpoint(href))
	eu, err2 := url.Parse(p.c.Endpoint)
	if err1 == nil && err2 == nil && strings.EqualFold(hu.Host, eu.Host) && hu.Scheme == eu.Scheme {
		return p
	}
	return p.anonymous()
}

// fixEndpoint rewrites URLs the Hub gives on its default host to the configured
// endpoint, as huggingface_hub's fix_hf_endpoint_in_url does for proxies/mirrors.
func (p *pusher) fixEndpoint(u string) string {
	if p.c.Endpoint != DefaultEndpoint {
		return strings.Replace(u, DefaultEndpoint, p.c.Endpoint, 1)
	}
	return u
}

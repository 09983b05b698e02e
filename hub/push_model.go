package hub

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Publishing a model repository (the packed weights that go with a kernel package): the
// repository is created with type model (existing is fine) and main is made to hold
// exactly the given files in one commit, as huggingface_hub's upload_folder with
// delete_patterns="*" does: files main has that the set lacks are deleted, except
// .gitattributes, which the Hub writes itself.

// ModelPushOptions says where to publish a model repo's files.
type ModelPushOptions struct {
	RepoID  string // "org/name"
	Private bool   // only used when the repository is created
	// DryRun computes and returns the operations without sending any request.
	DryRun bool
	// Summary and Description are the commit message.
	Summary, Description string
	// Progress receives one line per step (nil: discarded). The token is never written.
	Progress io.Writer
}

// PushModel publishes files to the main branch of the model repository opts.RepoID.
// Large files should be LocalFile entries: they are uploaded through LFS in sections.
func PushModel(ctx context.Context, c *Client, files []PackageFile, opts ModelPushOptions) (*PushResult, error) {
	ref, err := ParseRef(opts.RepoID)
	if err != nil || strings.Contains(opts.RepoID, "@") || !strings.Contains(opts.RepoID, "/") {
		return nil, fmt.Errorf("hub: model repo id %q: want ORG/NAME (a repository id, no revision)", opts.RepoID)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("hub: nothing to publish to %s", ref.Repo)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if f.Path == "" || strings.HasPrefix(f.Path, "/") || strings.Contains(f.Path, "..") || seen[f.Path] {
			return nil, fmt.Errorf("hub: %s: file path %q is empty, absolute, climbs out or repeats", ref.Repo, f.Path)
		}
		seen[f.Path] = true
	}
	log := opts.Progress
	if log == nil {
		log = io.Discard
	}
	summary := opts.Summary
	if summary == "" {
		summary = "Upload " + ref.Repo
	}
	res := &PushResult{RepoID: ref.Repo, Branch: "main", DryRun: opts.DryRun, URL: strings.TrimRight(c.Endpoint, "/") + "/" + ref.Repo}
	if opts.DryRun {
		vis := "public"
		if opts.Private {
			vis = "private"
		}
		res.Operations = []string{fmt.Sprintf("create repo model %s (%s; an existing repo is kept)", ref.Repo, vis)}
		for _, f := range files {
			res.Operations = append(res.Operations, fmt.Sprintf("upload mode %s %s (predicted)", f.Path, PredictUploadMode(f)))
		}
		for _, f := range files {
			res.Operations = append(res.Operations, fmt.Sprintf("add main %s (%d bytes)", f.Path, f.Size()))
		}
		res.Operations = append(res.Operations,
			"delete main files that this upload does not have, but .gitattributes (listed from main when pushing)",
			fmt.Sprintf("commit main %q", summary))
		fmt.Fprintf(log, "dry run: nothing was sent to %s\n", c.Endpoint)
		return res, nil
	}
	if c.Token == "" {
		return nil, fmt.Errorf("%w: no Hub token found: %s", ErrUnauthorized, authHint)
	}
	p := &pusher{c: c, repo: ref.Repo, repoType: repoTypeModel, log: log}
	if res.RepoCreated, err = p.createRepo(ctx, opts.Private); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "repo %s: %s\n", ref.Repo, map[bool]string{true: "created", false: "exists"}[res.RepoCreated])
	owned := func(path string) bool { return path != ".gitattributes" }
	if res.BuildCommit, err = p.commitFiles(ctx, res, "main", files, owned, summary, opts.Description); err != nil {
		return nil, err
	}
	return res, nil
}

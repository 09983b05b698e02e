package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Publishing a kernel-hub package, as `kernel-builder upload` does
// (huggingface/kernels kernel-builder/src/upload.rs): create the repository of type
// kernel (existing is fine), create branch v<N> if missing, commit build/** to v<N>
// deleting the files under build/ there that the package no longer has, then commit
// the card README.md to main. Upload modes come from the preupload endpoint; LFS
// content goes through the LFS batch API before the commit that names it.
//
// One difference from kernel-builder: on an existing branch it deletes stale files
// only inside the variant folders it uploads; xpuinject writes the whole package, so
// it deletes every stale file under build/ (a variant dropped from the package goes).

// PushOptions says what to publish where.
type PushOptions struct {
	RepoID  string // "org/name"
	Private bool   // only used when the repository is created
	// Version is the kernel major version (branch v<Version>); 0 means the version in
	// build/*/metadata.json, else 1.
	Version int
	// DryRun computes and returns the operations without sending any request.
	DryRun bool
	// Summary and Description override the commit message; by default it names
	// xpuinject, its version, the kernel and the model.
	Summary, Description string
	// Model names the model the package was made for when neither the card's front
	// matter (base_model) nor metadata.json records it.
	Model string
	// ToolVersion is xpuinject's version, for the commit message.
	ToolVersion string
	// Progress receives one line per step (nil: discarded). The token is never written.
	Progress io.Writer
	// Card, when set, is published as README.md instead of the package's own card.
	Card []byte
}

// PushResult says what was (or, for a dry run, would be) published.
type PushResult struct {
	RepoID string `json:"repo_id"`
	Branch string `json:"branch"` // "v<N>"
	URL    string `json:"url"`    // the branch on the Hub
	DryRun bool   `json:"dry_run"`
	// RepoCreated / BranchCreated: false when they already existed.
	RepoCreated   bool `json:"repo_created"`
	BranchCreated bool `json:"branch_created"`
	// BuildCommit and CardCommit are the commit ids on Branch and main; "" when that
	// branch already had exactly this content (no commit was made).
	BuildCommit string   `json:"build_commit"`
	CardCommit  string   `json:"card_commit"`
	Added       []string `json:"added"`     // repository paths added or changed (build files, README.md)
	Deleted     []string `json:"deleted"`   // stale build/ paths deleted from Branch
	Unchanged   []string `json:"unchanged"` // paths already on the Hub with this content
	LFS         []string `json:"lfs"`       // paths uploaded through LFS
	// Operations is the dry-run plan, one line per operation.
	Operations []string `json:"operations,omitempty"`
}

// lfsExtensions are file types the Hub's default .gitattributes stores in LFS; used
// only to predict upload modes in a dry run (a real push asks the preupload endpoint).
var lfsExtensions = map[string]bool{
	".bin": true, ".safetensors": true, ".pt": true, ".pth": true, ".ckpt": true, ".npy": true,
	".npz": true, ".onnx": true, ".so": true, ".gz": true, ".zip": true, ".tar": true,
	".pkl": true, ".pickle": true, ".h5": true, ".msgpack": true, ".zst": true, ".xz": true,
}

// PredictUploadMode guesses what the preupload endpoint will answer: "lfs" for binary
// content (a NUL byte in the 512-byte sample), files of 10 MiB or more and LFS file
// types; "regular" otherwise and always for empty files.
func PredictUploadMode(f PackageFile) string {
	switch {
	case f.Size() == 0:
		return "regular"
	case bytes.IndexByte(f.Sample(), 0) >= 0, f.Size() >= 10<<20, lfsExtensions[strings.ToLower(path.Ext(f.Path))]:
		return "lfs"
	}
	return "regular"
}

// Push publishes the package in dir to the kernel repository opts.RepoID.
// Errors wrap ErrNotPackage, ErrUnauthorized, ErrForbidden or ErrCommitRejected where
// they apply; on any error the result is nil and nothing is reported as published
// (commits already made before the failing step stay on the Hub: the error says which).
func Push(ctx context.Context, c *Client, dir string, opts PushOptions) (*PushResult, error) {
	ref, err := ParseRef(opts.RepoID)
	if err != nil || strings.Contains(opts.RepoID, "@") {
		return nil, fmt.Errorf("hub: --repo-id %q: want ORG/NAME (a repository id, no revision)", opts.RepoID)
	}
	pkg, err := LoadPackage(dir)
	if err != nil {
		return nil, err
	}
	if opts.Card != nil {
		if pkg.CardMeta, err = parseFrontMatter(opts.Card); err != nil {
			return nil, fmt.Errorf("hub: card: %w", err)
		}
		pkg.Card = PackageFile{Path: "README.md", Data: opts.Card}
	}
	version, err := pushVersion(pkg, opts.Version)
	if err != nil {
		return nil, err
	}
	branch := "v" + strconv.Itoa(version)
	log := opts.Progress
	if log == nil {
		log = io.Discard
	}
	model := pkg.Model()
	if model == "" {
		model = opts.Model
	}
	tool := opts.ToolVersion
	if tool == "" {
		tool = "dev"
	}
	buildSummary, cardSummary, description := commitMessages(pkg, opts, tool, branch, model)
	res := &PushResult{RepoID: ref.Repo, Branch: branch, DryRun: opts.DryRun,
		URL: strings.TrimRight(c.Endpoint, "/") + "/" + kernelsSegment + "/" + ref.Repo + "/tree/" + branch}

	if opts.DryRun {
		res.Operations = dryRun(pkg, ref.Repo, branch, opts.Private, buildSummary, cardSummary)
		fmt.Fprintf(log, "dry run: nothing was sent to %s\n", c.Endpoint)
		return res, nil
	}
	if c.Token == "" {
		return nil, fmt.Errorf("%w: no Hub token found: %s", ErrUnauthorized, authHint)
	}
	p := &pusher{c: c, repo: ref.Repo, repoType: repoTypeKernel, log: log}

	if res.RepoCreated, err = p.createRepo(ctx, opts.Private); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "repo %s: %s\n", ref.Repo, map[bool]string{true: "created", false: "exists"}[res.RepoCreated])
	if res.BranchCreated, err = p.createBranch(ctx, branch); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "branch %s: %s\n", branch, map[bool]string{true: "created", false: "exists"}[res.BranchCreated])

	res.BuildCommit, err = p.commitFiles(ctx, res, branch, pkg.Build, underBuild, buildSummary, description)
	if err != nil {
		return nil, err
	}
	res.CardCommit, err = p.commitFiles(ctx, res, "main", []PackageFile{pkg.Card}, nil, cardSummary, description)
	if err != nil {
		if res.BuildCommit != "" {
			return nil, fmt.Errorf("%w (the build was committed to %s as %s; the card on main was not)", err, branch, res.BuildCommit)
		}
		return nil, err
	}
	return res, nil
}

func pushVersion(pkg *Package, want int) (int, error) {
	have := pkg.Version()
	hasMeta := pkg.Metadata[pkg.Variants[0]].Version != nil
	switch {
	case want < 0:
		return 0, fmt.Errorf("hub: version %d is negative", want)
	case want == 0 && hasMeta:
		return have, nil
	case want == 0:
		return 1, nil
	case hasMeta && want != have:
		return 0, fmt.Errorf("hub: version %d asked, but build/%s/metadata.json says version %d (publish it as v%d, or rewrite the package)", want, pkg.Variants[0], have, have)
	}
	return want, nil
}

func commitMessages(pkg *Package, opts PushOptions, tool, branch, model string) (build, card, description string) {
	subject := fmt.Sprintf("%s %s", pkg.Name(), branch)
	forModel := ""
	if model != "" {
		forModel = " for " + model
	}
	build = fmt.Sprintf("xpuinject %s: %s%s", tool, subject, forModel)
	card = fmt.Sprintf("xpuinject %s: card of %s%s", tool, subject, forModel)
	if opts.Summary != "" {
		build, card = opts.Summary, opts.Summary+" (card)"
	}
	description = opts.Description
	if description == "" {
		description = fmt.Sprintf("Published with xpuinject %s.\nKernel: %s\nVariants: %s\n", tool, subject, strings.Join(pkg.Variants, ", "))
		if model != "" {
			description += "Model: " + model + "\n"
		}
	}
	return build, card, description
}

// dryRun lists the operations of a push without contacting the Hub. Upload modes are
// predicted (PredictUploadMode) and stale files are described, not listed: both need
// the Hub, and a dry run sends nothing.
func dryRun(pkg *Package, repo, branch string, private bool, buildSummary, cardSummary string) []string {
	vis := "public"
	if private {
		vis = "private"
	}
	ops := []string{
		fmt.Sprintf("create repo kernel %s (%s; an existing repo is kept)", repo, vis),
		fmt.Sprintf("create branch %s from main (an existing branch is kept)", branch),
	}
	for _, f := range pkg.Build {
		ops = append(ops, fmt.Sprintf("upload mode %s %s (predicted)", f.Path, PredictUploadMode(f)))
	}
	for _, f := range pkg.Build {
		ops = append(ops, fmt.Sprintf("add %s %s (%d bytes)", branch, f.Path, f.Size()))
	}
	ops = append(ops,
		fmt.Sprintf("delete %s build/** files that this package does not have (listed from %s when pushing)", branch, branch),
		fmt.Sprintf("commit %s %q", branch, buildSummary),
		fmt.Sprintf("upload mode %s %s (predicted)", pkg.Card.Path, PredictUploadMode(pkg.Card)),
		fmt.Sprintf("add main %s (%d bytes)", pkg.Card.Path, pkg.Card.Size()),
		fmt.Sprintf("commit main %q", cardSummary),
	)
	return ops
}

// underBuild selects the files a kernel push owns on its version branch: build/**.
func underBuild(path string) bool { return strings.HasPrefix(path, "build/") }

// commitFiles brings rev to hold files: it lists rev, keeps files whose content is
// already there, deletes the files owned selects that are not in files (nothing when
// owned is nil), asks upload modes, uploads LFS content and commits. It returns the
// commit id, or "" when rev already matched.
func (p *pusher) commitFiles(ctx context.Context, res *PushResult, rev string, files []PackageFile, owned func(string) bool, summary, description string) (string, error) {
	remote, err := p.listTree(ctx, rev)
	if err != nil {
		return "", err
	}
	want := map[string]bool{}
	var changed []PackageFile
	var unchanged []string
	for _, f := range files {
		want[f.Path] = true
		if e, ok := remote[f.Path]; ok && e.sameContent(f) {
			unchanged = append(unchanged, f.Path)
			continue
		}
		changed = append(changed, f)
	}
	var deleted []string
	if owned != nil {
		for pth := range remote {
			if owned(pth) && !want[pth] {
				deleted = append(deleted, pth)
			}
		}
		sort.Strings(deleted)
	}
	if len(changed) == 0 && len(deleted) == 0 {
		fmt.Fprintf(p.log, "%s: up to date (%d files unchanged), no commit\n", rev, len(unchanged))
		res.Unchanged = append(res.Unchanged, unchanged...)
		return "", nil
	}

	var ops []commitOp
	var lfs []PackageFile
	if len(changed) > 0 {
		modes, err := p.preupload(ctx, rev, changed)
		if err != nil {
			return "", err
		}
		for i := range changed {
			f := &changed[i]
			m := modes[f.Path]
			if m.ShouldIgnore {
				return "", fmt.Errorf("hub: %s@%s: the Hub would ignore %s (a .gitignore on %s matches it); remove that rule or the file", p.repo, rev, f.Path, rev)
			}
			kind := "file"
			if m.UploadMode == "lfs" {
				kind = "lfsFile"
				lfs = append(lfs, *f)
			}
			ops = append(ops, commitOp{Kind: kind, Path: f.Path, File: f})
		}
	}
	for _, d := range deleted {
		ops = append(ops, commitOp{Kind: "deletedFile", Path: d})
	}
	if len(lfs) > 0 {
		fmt.Fprintf(p.log, "%s: uploading %d LFS file(s)\n", rev, len(lfs))
		if err := p.uploadLFS(ctx, rev, lfs); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(p.log, "%s: committing %d addition(s), %d deletion(s)\n", rev, len(changed), len(deleted))
	sha, err := p.commit(ctx, rev, summary, description, ops)
	if err != nil && !IsAuthError(err) {
		// A commit whose answer was lost (connection dropped after the Hub applied it)
		// is retried by Client.Do; the retry then fails (a deleted file is gone) or the
		// whole attempt errs. Look at the branch: if it now holds exactly this package,
		// the commit landed.
		if landed, head := p.landed(ctx, rev, files, owned); landed {
			fmt.Fprintf(p.log, "%s: the commit's answer was lost, but %s now holds the package (head %s)\n", rev, rev, head)
			sha, err = head, nil
		}
	}
	if err != nil {
		return "", err
	}
	fmt.Fprintf(p.log, "%s: committed %s\n", rev, sha)
	for _, f := range changed {
		res.Added = append(res.Added, f.Path)
	}
	for _, f := range lfs {
		res.LFS = append(res.LFS, f.Path)
	}
	res.Deleted = append(res.Deleted, deleted...)
	res.Unchanged = append(res.Unchanged, unchanged...)
	return sha, nil
}

// landed reports whether rev holds files (same content) and no other file owned
// selects, and returns rev's head commit.
func (p *pusher) landed(ctx context.Context, rev string, files []PackageFile, owned func(string) bool) (bool, string) {
	remote, err := p.listTree(ctx, rev)
	if err != nil {
		return false, ""
	}
	want := map[string]bool{}
	for _, f := range files {
		want[f.Path] = true
		if e, ok := remote[f.Path]; !ok || !e.sameContent(f) {
			return false, ""
		}
	}
	for pth := range remote {
		if owned != nil && owned(pth) && !want[pth] {
			return false, ""
		}
	}
	head, err := p.revisionSHA(ctx, rev)
	if err != nil {
		return false, ""
	}
	return true, head
}

// IsAuthError reports whether err is a 401/403 from publishing.
func IsAuthError(err error) bool {
	return errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden)
}

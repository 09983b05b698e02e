// Command hubtestserver serves fixture folders as Hugging Face Hub repositories (the
// hub/hubtest server) on a loopback port, for tests in other languages:
//
//	hubtestserver --repo org/name=testdata/fixtures/llama-tiny [--repo ...] [--lfs '*.safetensors']
//	              [--token T --gated org/name --private org/name]
//
// Its first stdout line is the endpoint ("http://127.0.0.1:PORT", for HF_ENDPOINT). It
// exits on SIGTERM or SIGINT, and when its stdin is closed (so a test harness that dies
// does not leave it behind; --watch-stdin=false turns that off).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/xpuinject/xpuinject/hub/hubtest"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hubtestserver: "+err.Error())
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fl := flag.NewFlagSet("hubtestserver", flag.ContinueOnError)
	var repos, lfs, gated, private listFlag
	fl.Var(&repos, "repo", "org/name=folder (repeatable); [type:]org/name, type model (default), dataset or kernel")
	fl.Var(&lfs, "lfs", "glob of files stored as LFS (repeatable; default *.safetensors)")
	fl.Var(&gated, "gated", "org/name of a gated repository (repeatable)")
	fl.Var(&private, "private", "org/name of a private repository (repeatable)")
	token := fl.String("token", "", "the token that opens gated and private repositories")
	addr := fl.String("addr", "127.0.0.1:0", "listen address")
	rate := fl.Int64("rate", 0, "limit file content to about this many bytes per second (0: no limit)")
	watchStdin := fl.Bool("watch-stdin", true, "exit when stdin is closed")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if len(repos) == 0 {
		return errors.New("no --repo given")
	}
	if len(lfs) == 0 {
		lfs = listFlag{"*.safetensors"}
	}
	store := hubtest.NewStore()
	for _, r := range repos {
		spec, dir, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("--repo %q: want org/name=folder", r)
		}
		repoType, id := "model", spec
		if t, rest, ok := strings.Cut(spec, ":"); ok {
			repoType, id = t, rest
		}
		files, err := loadFolder(dir, lfs)
		if err != nil {
			return fmt.Errorf("--repo %s: %w", spec, err)
		}
		store.Put(repoType, id, "main", files)
		repo := store.Repo(repoType, id)
		for _, g := range gated {
			if g == id {
				repo.Gated = true
			}
		}
		for _, p := range private {
			if p == id {
				repo.Private = true
			}
		}
	}
	srv := hubtest.New(store)
	srv.Token = *token
	srv.Rate = *rate
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "http://%s\n", ln.Addr())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *watchStdin {
		go func() {
			io.Copy(io.Discard, stdin)
			stop()
		}()
	}
	hs := &http.Server{Handler: srv}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loadFolder reads every file under dir (skipping .git) into repository files.
func loadFolder(dir string, lfs []string) (map[string]hubtest.File, error) {
	files := map[string]hubtest.File{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		isLFS := false
		for _, g := range lfs {
			if m, _ := path.Match(g, path.Base(rel)); m {
				isLFS = true
			}
		}
		files[rel] = hubtest.File{Data: data, LFS: isLFS}
		return nil
	})
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s: no files", dir)
	}
	return files, err
}

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package hub

import "context"

// lockFile is a no-op where flock is unavailable: blobs still become visible only by
// an atomic rename after verification, so a race costs bandwidth, not correctness
// (two writers of one .incomplete are caught by the size/sha256 check).
func lockFile(ctx context.Context, path string) (func(), error) { return func() {}, nil }

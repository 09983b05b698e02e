//go:build !linux

package outdir

// exchangeDirs has no one-step swap here: Commit renames in two steps, and a crash
// between them is repaired by the next cleanup (CleanStale).
func exchangeDirs(a, b string) (bool, error) { return false, nil }

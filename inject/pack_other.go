//go:build !linux

package inject

// startWriteback is a no-op where sync_file_range does not exist; the fsync at the end
// of each shard does all the work.
func startWriteback(f packFile, off, n int64) {}

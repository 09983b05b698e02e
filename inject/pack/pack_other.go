//go:build !(linux && (amd64 || arm64))

package pack

// startWriteback is a no-op where sync_file_range does not exist; the fsync at the end
// of each shard does all the work.
func startWriteback(f packFile, off, n int64) {}

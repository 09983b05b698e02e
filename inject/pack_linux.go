//go:build linux

package inject

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to disk now, without
// waiting, so the fsync at the end of a shard finds little left to do and disk writes
// overlap with computing the next tensors (measured: 5.0 s -> 3.5 s for the 2.5 GB
// benchmark, whose 1.2 GB output otherwise waits on the final fsync). Errors are
// ignored: the fsync still decides.
func startWriteback(f packFile, off, n int64) {
	if fh, ok := f.(*os.File); ok && n > 0 {
		_ = unix.SyncFileRange(int(fh.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

//go:build linux && (amd64 || arm64)

package pack

import (
	"os"
	"syscall"
)

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE from <linux/fs.h>.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to start writing [off, off+n) of f to disk now, without
// waiting, so the fsync at the end of a shard finds little left to do and disk writes
// overlap with computing the next tensors (the 2.5 GB pack benchmark: 5.0 s -> 3.5 s).
// Errors are ignored: the fsync still decides. On 64-bit Linux the offsets fit one
// register each, so the raw syscall is portable across these two architectures.
func startWriteback(f packFile, off, n int64) {
	if fh, ok := f.(*os.File); ok && n > 0 {
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fh.Fd(), uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	}
}

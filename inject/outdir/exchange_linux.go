package outdir

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchangeDirs swaps a and b with renameat2(RENAME_EXCHANGE) (Linux 3.15). Some file
// systems do not support it (EINVAL), older kernels lack the call (ENOSYS): then false.
func exchangeDirs(a, b string) (bool, error) {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return false, nil
	}
	return false, err
}

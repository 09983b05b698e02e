package outdir

import "sync/atomic"

// faultHook, when set, is asked before each change this package makes to the file
// system; an error it returns is returned as if the system call had failed. It lets
// tests make a folder read-only for root too, where chmod does not stop writes.
var faultHook atomic.Pointer[func(op, path string) error]

// SetFault installs f (ops: access, mkdir, create, write, rename, exchange, remove) until restore is
// called. For tests of failure paths.
func SetFault(f func(op, path string) error) (restore func()) {
	prev := faultHook.Swap(&f)
	return func() { faultHook.Store(prev) }
}

func fault(op, path string) error {
	if f := faultHook.Load(); f != nil {
		return (*f)(op, path)
	}
	return nil
}

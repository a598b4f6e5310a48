//go:build !windows && !plan9 && !solaris && !aix && !android

package datastore

import (
	"os"
	"syscall"
)

// unlock releases bbolt's flock on f. Closing f alone would not: the
// memory map bbolt made of it keeps the open file, and so its lock.
func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

//go:build windows || plan9 || solaris || aix || android

package datastore

import "os"

// unlock leaves the lock to Close where bbolt does not use flock.
func unlock(*os.File) {}

//go:build unix

package engine_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user+system) the process has used so far; on
// a loaded machine it measures work where wall time measures waiting.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package cluster_test

import "syscall"

// processCPU is the CPU time (user and system) the process used so far.
func processCPU() int64 { return rusage(syscall.RUSAGE_SELF) }

// threadCPU is the CPU time the calling thread used so far.
func threadCPU() int64 { return rusage(syscall.RUSAGE_THREAD) }

func rusage(who int) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

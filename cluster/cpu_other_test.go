//go:build !linux

package cluster_test

// Elsewhere the benchmarks report no CPU time (zero).
func processCPU() int64 { return 0 }

func threadCPU() int64 { return 0 }

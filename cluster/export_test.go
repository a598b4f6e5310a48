package cluster

// PutPaced is putPaced, for BenchmarkBootstrap, which writes a snapshot
// as a replica does.
var PutPaced = putPaced

package cluster

// SnapshotChunk is snapshotChunk, for BenchmarkBootstrap, which writes a
// snapshot as a replica does.
const SnapshotChunk = snapshotChunk

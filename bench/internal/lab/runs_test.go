package lab

import "testing"

// TestLogBehind: a window is waited on while the decision log has written
// fewer events than decisions were made, and only then.
func TestLogBehind(t *testing.T) {
	snap := func(emitted, dropped, grpc, permit float64) *Snapshot {
		return &Snapshot{logEmitted: emitted, logDropped: dropped, decisions: map[string]float64{"grpc": grpc, "permit": permit}}
	}
	before := snap(100, 2, 50, 52)
	for _, tc := range []struct {
		name  string
		after *Snapshot
		want  bool
	}{
		{"caught up", snap(140, 2, 70, 72), false},
		{"one event to write", snap(139, 2, 70, 72), true},
		{"one dropped", snap(139, 3, 70, 72), false},
		{"no log", snap(100, 2, 70, 72), false},
		{"more written than decided", snap(150, 2, 70, 72), false},
	} {
		if got := logBehind(before, tc.after); got != tc.want {
			t.Errorf("%s: logBehind = %v, want %v", tc.name, got, tc.want)
		}
	}
}

package pdp

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/nexuspdp/nexus/pdp/internal/result"
)

// memoSlots is the number of results the memo of parsed results holds
// at most (a power of two).
const memoSlots = 1 << 14

// maxMemoized is the longest result document the memo keeps: a longer one
// is parsed every time.
const maxMemoized = 4096

// resultMemo memoises the parsing of result documents by their bytes: most
// results repeat (a reason, a subject), and parsing one costs more than
// finding it again. It is a table of slots, each holding the last result
// whose bytes hashed to it: a lookup is one hash and one comparison, with
// no lock, no bookkeeping and no memory beyond the slots' results. Two
// results that share a slot replace each other, and each is parsed again
// when it comes back. Parsed decisions are never modified.
type resultMemo struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[memoEntry]
}

type memoEntry struct {
	key string // the result's kind (resultKind) and document
	d   result.Decision
}

func newResultMemo() *resultMemo { return &resultMemo{seed: maphash.MakeSeed()} }

// get returns the decision memoised for key (read in place, not kept).
func (m *resultMemo) get(key []byte) (*memoEntry, uint64) {
	h := maphash.Bytes(m.seed, key)
	if e := m.slots[h&(memoSlots-1)].Load(); e != nil && e.key == string(key) {
		return e, h
	}
	return nil, h
}

// put memoises d for key, whose hash get returned.
func (m *resultMemo) put(h uint64, key []byte, d result.Decision) {
	m.slots[h&(memoSlots-1)].Store(&memoEntry{key: string(key), d: d})
}

package source

// hashSet is a set of nonzero 64-bit hashes: linear probing in a
// power-of-two table at most half full, deleting by shifting the run back,
// so the churn of an insert and a delete per message leaves no tombstones
// (a Go map's probes grow long under it). It never shrinks; the flow
// budget bounds it.
type hashSet struct {
	slots []uint64 // 0: empty
	n     int
}

// slot is where k's probe starts (the low bits pick the shard).
func (s *hashSet) slot(k uint64) int { return int((k >> 8) & uint64(len(s.slots)-1)) }

// add inserts k, reporting false if it was there.
func (s *hashSet) add(k uint64) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	mask := len(s.slots) - 1
	for i := s.slot(k); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case k:
			return false
		case 0:
			s.slots[i] = k
			s.n++
			return true
		}
	}
}

// remove deletes k, moving back the entries after it that probed past its
// slot, so no probe meets a hole it should not.
func (s *hashSet) remove(k uint64) {
	if s.n == 0 {
		return
	}
	mask := len(s.slots) - 1
	i := s.slot(k)
	for s.slots[i] != k {
		if s.slots[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j fills the hole unless its home is in (i, j].
		if home := s.slot(s.slots[j]); (j-home)&mask >= (j-i)&mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
}

func (s *hashSet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(16, 2*len(old)))
	s.n = 0
	for _, k := range old {
		if k != 0 {
			s.add(k)
		}
	}
}

//! Allocation state for one range: a hierarchical bitmap, or a sparse set for huge ranges.
//!
//! Upstream scans for a free slot linearly (bitmap for NodePorts, lazy iterator for
//! IPAddress objects). A flat scan over a nearly full /12 would touch ~16k words; the
//! summary levels here (a bit per word that is full) make "next free slot at or after
//! `i`" cost a handful of word operations at any fill level, with no allocation per call.
//! IPv6 ranges up to /64 cannot have a bitmap of the whole range, so ranges above
//! [`DENSE_LIMIT`] slots keep a sorted set of the taken offsets instead.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// Ranges with at most this many slots use the dense bitmap (2^24 slots = 2 MiB).
pub const DENSE_LIMIT: u64 = 1 << 24;

/// A bitmap of `len` slots with summary levels. Bit set = slot taken.
///
/// `levels[0]` holds one bit per slot; bit `j` of `levels[k + 1]` is set iff word `j` of
/// `levels[k]` is completely full. Bits past the end are permanently set, so they look
/// taken and searches never return them.
#[derive(Debug, Clone)]
pub struct HierBitmap {
    len: u64,
    used: u64,
    levels: Vec<Vec<u64>>,
}

impl HierBitmap {
    /// An empty bitmap of `len` slots.
    pub fn new(len: u64) -> Self {
        let mut levels = Vec::new();
        let mut bits = len;
        loop {
            let words = bits.div_ceil(64).max(1);
            let mut level = vec![0u64; words as usize];
            let tail = bits % 64;
            if bits == 0 {
                level[0] = u64::MAX;
            } else if tail != 0 {
                // Padding past the end reads as taken.
                level[(words - 1) as usize] = !0u64 << tail;
            }
            let done = words == 1;
            levels.push(level);
            if done {
                break;
            }
            bits = words;
        }
        let mut bm = Self {
            len,
            used: 0,
            levels,
        };
        // Propagate words that are full from padding alone (only possible for len == 0).
        for l in 0..bm.levels.len().saturating_sub(1) {
            for w in 0..bm.levels[l].len() {
                if bm.levels[l][w] == u64::MAX {
                    bm.levels[l + 1][w / 64] |= 1 << (w % 64);
                }
            }
        }
        bm
    }

    /// Number of slots.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// `true` if the bitmap has no slots.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots taken.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Is slot `i` taken? Out-of-range slots read as not taken.
    pub fn has(&self, i: u64) -> bool {
        i < self.len && self.levels[0][(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Take slot `i`; `false` if it was already taken or out of range.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len || self.has(i) {
            return false;
        }
        let mut idx = i;
        for l in 0..self.levels.len() {
            let w = (idx / 64) as usize;
            self.levels[l][w] |= 1 << (idx % 64);
            if self.levels[l][w] != u64::MAX {
                break;
            }
            idx = w as u64;
        }
        self.used += 1;
        true
    }

    /// Free slot `i`; `false` if it was not taken.
    pub fn clear(&mut self, i: u64) -> bool {
        if !self.has(i) {
            return false;
        }
        let mut idx = i;
        for l in 0..self.levels.len() {
            let w = (idx / 64) as usize;
            let was_full = self.levels[l][w] == u64::MAX;
            self.levels[l][w] &= !(1 << (idx % 64));
            if !was_full {
                break;
            }
            idx = w as u64;
        }
        self.used -= 1;
        true
    }

    /// First free bit at index `>= i` in `levels[level]`, if any.
    fn next_zero(&self, level: usize, i: u64) -> Option<u64> {
        let words = &self.levels[level];
        let mut w = (i / 64) as usize;
        if w >= words.len() {
            return None;
        }
        let first = !words[w] & (!0u64 << (i % 64));
        if first != 0 {
            return Some(w as u64 * 64 + u64::from(first.trailing_zeros()));
        }
        if level + 1 < self.levels.len() {
            let nw = self.next_zero(level + 1, w as u64 + 1)? as usize;
            // Invariant: a clear summary bit means that word has a clear bit, and the
            // summary never points past the last word (padding is set).
            let free = !words.get(nw)?;
            return Some(nw as u64 * 64 + u64::from(free.trailing_zeros()));
        }
        // Top level: at most one word, so nothing more to scan; kept general anyway.
        w += 1;
        while w < words.len() {
            if words[w] != u64::MAX {
                return Some(w as u64 * 64 + u64::from((!words[w]).trailing_zeros()));
            }
            w += 1;
        }
        None
    }

    /// First free slot in `[from, to)`.
    pub fn first_free(&self, from: u64, to: u64) -> Option<u64> {
        let to = to.min(self.len);
        if from >= to {
            return None;
        }
        self.next_zero(0, from).filter(|&i| i < to)
    }

    /// Iterate taken slots in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels[0]
            .iter()
            .enumerate()
            .flat_map(move |(w, &word)| {
                let len = self.len;
                let mut bits = word;
                std::iter::from_fn(move || {
                    while bits != 0 {
                        let b = u64::from(bits.trailing_zeros());
                        bits &= bits - 1;
                        let i = w as u64 * 64 + b;
                        if i < len {
                            return Some(i);
                        }
                    }
                    None
                })
            })
    }
}

/// Multiplicative hasher for `u64` offsets (the std SipHash costs more than the probe).
#[derive(Debug, Clone, Copy, Default)]
pub struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
        }
    }

    fn write_u64(&mut self, i: u64) {
        // Fibonacci hashing; the high bits end up well mixed, and hashbrown uses both ends.
        let h = (i ^ (i >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

/// Taken offsets of a range too large for a bitmap (IPv6 up to /64).
///
/// Dynamic picks start at a random offset in a huge, mostly empty range, so the first
/// probe is almost always free. Probing walks forward over taken offsets; it never
/// takes more than `taken + 1` steps, so it is bounded by the number of allocations,
/// never by the size of the range.
#[derive(Debug, Clone, Default)]
pub struct SparseSet {
    len: u64,
    taken: HashSet<u64, BuildHasherDefault<OffsetHasher>>,
}

impl SparseSet {
    /// An empty set over `len` slots.
    pub fn new(len: u64) -> Self {
        Self {
            len,
            taken: HashSet::default(),
        }
    }

    /// First free slot in `[from, to)`.
    pub fn first_free(&self, from: u64, to: u64) -> Option<u64> {
        let to = to.min(self.len);
        if from >= to {
            return None;
        }
        let steps = (to - from).min(self.taken.len() as u64 + 1);
        (from..from + steps).find(|i| !self.taken.contains(i))
    }

    /// Taken offsets, ascending.
    pub fn sorted(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.taken.iter().copied().collect();
        v.sort_unstable();
        v
    }
}

/// Allocation state of one range, dense or sparse by size.
#[derive(Debug, Clone)]
pub enum Slots {
    /// Bitmap (ranges up to [`DENSE_LIMIT`] slots).
    Dense(HierBitmap),
    /// Sorted set (larger IPv6 ranges).
    Sparse(SparseSet),
}

impl Slots {
    /// State for `len` slots, choosing the representation by size.
    pub fn new(len: u64) -> Self {
        if len <= DENSE_LIMIT {
            Self::Dense(HierBitmap::new(len))
        } else {
            Self::Sparse(SparseSet::new(len))
        }
    }

    /// Number of slots.
    pub fn len(&self) -> u64 {
        match self {
            Self::Dense(b) => b.len(),
            Self::Sparse(s) => s.len,
        }
    }

    /// `true` if there are no slots.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots taken.
    pub fn used(&self) -> u64 {
        match self {
            Self::Dense(b) => b.used(),
            Self::Sparse(s) => s.taken.len() as u64,
        }
    }

    /// Is slot `i` taken?
    pub fn has(&self, i: u64) -> bool {
        match self {
            Self::Dense(b) => b.has(i),
            Self::Sparse(s) => s.taken.contains(&i),
        }
    }

    /// Take slot `i`; `false` if taken already or out of range.
    pub fn set(&mut self, i: u64) -> bool {
        match self {
            Self::Dense(b) => b.set(i),
            Self::Sparse(s) => i < s.len && s.taken.insert(i),
        }
    }

    /// Free slot `i`; `false` if it was free.
    pub fn clear(&mut self, i: u64) -> bool {
        match self {
            Self::Dense(b) => b.clear(i),
            Self::Sparse(s) => s.taken.remove(&i),
        }
    }

    /// First free slot in `[from, to)`.
    pub fn first_free(&self, from: u64, to: u64) -> Option<u64> {
        match self {
            Self::Dense(b) => b.first_free(from, to),
            Self::Sparse(s) => s.first_free(from, to),
        }
    }

    /// First free slot scanning `[start, to)` then wrapping to `[from, start)`:
    /// upstream's "random start, wrap within the band".
    pub fn first_free_wrapping(&self, from: u64, to: u64, start: u64) -> Option<u64> {
        self.first_free(start, to)
            .or_else(|| self.first_free(from, start))
    }

    /// Taken slots in ascending order.
    pub fn taken(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Self::Dense(b) => Box::new(b.iter()),
            Self::Sparse(s) => Box::new(s.sorted().into_iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_tiny_bitmaps() {
        let b = HierBitmap::new(0);
        assert_eq!(b.first_free(0, 10), None);
        let mut b = HierBitmap::new(1);
        assert_eq!(b.first_free(0, 1), Some(0));
        assert!(b.set(0));
        assert!(!b.set(0));
        assert_eq!(b.first_free(0, 1), None);
        assert!(b.clear(0));
        assert_eq!(b.first_free(0, 1), Some(0));
    }

    #[test]
    fn summary_levels_find_the_last_free_slot() {
        for len in [63u64, 64, 65, 4095, 4096, 4097, 300_000] {
            let mut b = HierBitmap::new(len);
            for i in 0..len {
                assert!(b.set(i));
            }
            assert_eq!(b.first_free(0, len), None, "len {len}");
            let hole = len * 2 / 3;
            assert!(b.clear(hole));
            assert_eq!(b.first_free(0, len), Some(hole));
            assert_eq!(b.first_free(hole + 1, len), None);
            assert!(b.set(hole));
            assert_eq!(b.used(), len);
            assert!(b.clear(len - 1));
            assert_eq!(b.first_free(0, len), Some(len - 1));
        }
    }

    #[test]
    fn sparse_finds_gaps_and_bounds() {
        let mut s = Slots::Sparse(SparseSet::new(u64::MAX));
        assert_eq!(s.first_free(0, u64::MAX), Some(0));
        for i in 10..20 {
            assert!(s.set(i));
        }
        assert_eq!(s.first_free(10, 100), Some(20));
        assert_eq!(s.first_free(10, 20), None);
        assert_eq!(s.first_free_wrapping(5, 20, 12), Some(5));
        assert_eq!(s.first_free(u64::MAX - 1, u64::MAX), Some(u64::MAX - 1));
        // A full small window is reported as full, not scanned forever.
        assert_eq!(s.first_free(12, 15), None);
        assert_eq!(s.taken().collect::<Vec<_>>(), (10..20).collect::<Vec<_>>());
    }

    #[test]
    fn iter_lists_taken_slots() {
        let mut b = Slots::new(200);
        for i in [0u64, 63, 64, 199] {
            b.set(i);
        }
        assert_eq!(b.taken().collect::<Vec<_>>(), vec![0, 63, 64, 199]);
    }
}

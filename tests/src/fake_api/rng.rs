//! A seeded SplitMix64 generator: `generateName` suffixes and fault probabilities must be
//! reproducible run to run, and this is all the randomness the fake needs.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough for test names.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

/// The alphabet upstream `generateName` uses (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Five characters from the upstream `generateName` alphabet.
    pub(crate) fn name_suffix(&mut self) -> String {
        (0..5)
            .map(|_| {
                let i = (self.next_u64() % NAME_ALPHABET.len() as u64) as usize;
                // `i < NAME_ALPHABET.len()` by the modulo above, so the fallback never applies.
                char::from(NAME_ALPHABET.get(i).copied().unwrap_or(b'x'))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_names() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let names: Vec<String> = (0..3).map(|_| a.name_suffix()).collect();
        assert_eq!(names, (0..3).map(|_| b.name_suffix()).collect::<Vec<_>>());
        assert!(
            names
                .iter()
                .all(|n| n.len() == 5 && n.bytes().all(|c| NAME_ALPHABET.contains(&c)))
        );
        assert_ne!(names[0], names[1]);
        let u = Rng::new(1).unit();
        assert!((0.0..1.0).contains(&u));
    }
}

//! Small helpers shared by the scaling policies: a fast deterministic hasher (FNV-1a) for
//! lookup tables and a seeded mixer for the chaos monkey's choice.

use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, 64 bit: deterministic across runs and platforms, fast on short keys.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// `HashMap`/`HashSet` hasher for lookups whose iteration order never leaks into a decision.
pub type FastHash = BuildHasherDefault<Fnv>;

/// SplitMix64's finaliser: spreads a seed into a well-mixed 64-bit value.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

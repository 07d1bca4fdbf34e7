//! The crate's one home for non-cryptographic hashing: deterministic hashers (FNV-1a for
//! checksums, seeds and anything persisted or shown; a word-at-a-time one for lookup tables)
//! and a seeded mixer (the chaos monkey's choice). Every policy and adapter that needs such a
//! hash uses these instead of writing its own; cryptographic digests use `sha2`.

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

/// A word-at-a-time multiplicative hasher (the rustc "Fx" scheme): deterministic, several
/// times faster than FNV-1a on strings; for lookup tables and grouping keys only (use [`Fnv`]
/// for anything persisted, such as checksums).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fx(u64);

const FX_SEED: u64 = 0x517c_c1b7_2722_0a95;

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// `HashMap`/`HashSet` hasher for lookups whose iteration order never leaks into a decision.
pub type FastHash = BuildHasherDefault<Fx>;

/// SplitMix64's finaliser: spreads a seed into a well-mixed 64-bit value.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

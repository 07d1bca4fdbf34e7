//! The strings the simulator makes at every pod binding, node creation, agent step and
//! timeline event (names, uids, keys, messages), built without `format!`: sized once, the
//! pieces pushed. Each helper writes exactly what the `format!` it replaces wrote (the
//! properties below compare them on random inputs); `nodemgr-sim/README.md`, "Performance",
//! "Seventh round (j)", tells what that saved.

/// The pieces one after the other, in one allocation of the exact size.
pub(crate) fn concat(parts: &[&str]) -> String {
    let len = parts.iter().map(|p| p.len()).sum();
    let mut out = String::with_capacity(len);
    for p in parts {
        out.push_str(p);
    }
    out
}

/// Every two-digit pair "00" to "99", one after the other.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// The decimal digits of a number (as `{}` writes it), zero-padded to a width (as `{:0w$}`),
/// on the stack.
#[derive(Clone, Copy)]
pub(crate) struct Digits {
    buf: [u8; 24],
    start: usize,
}

impl Digits {
    /// `n` in decimal, as `format!("{n}")`.
    pub(crate) fn of(n: u64) -> Self {
        Self::padded(n, 0)
    }

    /// `n` in decimal with leading zeros up to `width` digits (at most 24), as
    /// `format!("{n:0width$}")`.
    pub(crate) fn padded(mut n: u64, width: usize) -> Self {
        let mut buf = [b'0'; 24];
        let mut start = buf.len();
        // Two digits at a time from a table (one division per pair); a `u64` has at most 20
        // digits, so `start` stays in the buffer.
        while n >= 100 {
            // `n % 100` is below 100: a pair's index in the table.
            let pair = (n % 100) as usize * 2;
            n /= 100;
            start -= 2;
            if let (Some(slot), Some(digits)) =
                (buf.get_mut(start..start + 2), PAIRS.get(pair..pair + 2))
            {
                slot.copy_from_slice(digits);
            }
        }
        if n >= 10 {
            // Below 100.
            let pair = n as usize * 2;
            start -= 2;
            if let (Some(slot), Some(digits)) =
                (buf.get_mut(start..start + 2), PAIRS.get(pair..pair + 2))
            {
                slot.copy_from_slice(digits);
            }
        } else {
            start -= 1;
            if let Some(slot) = buf.get_mut(start) {
                // A single digit.
                *slot = b'0' + n as u8;
            }
        }
        let start = start.min(buf.len().saturating_sub(width));
        Self { buf, start }
    }

    /// The digits, as bytes (compared without making a string).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    /// Appends the digits to `out` (ASCII pushed as characters, no UTF-8 check).
    pub(crate) fn push_to(&self, out: &mut String) {
        out.extend(self.as_bytes().iter().map(|&b| char::from(b)));
    }

    /// The digits.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII digits were written.
        std::str::from_utf8(self.buf.get(self.start..).unwrap_or_default()).unwrap_or_default()
    }
}

/// `n` in decimal (`usize`), as `format!("{n}")`.
pub(crate) fn digits(n: usize) -> Digits {
    Digits::of(u64::try_from(n).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The built strings are those `format!` writes: numbers of every size (small ones
        /// often), widths below and above their length, pieces empty or not.
        #[test]
        fn built_strings_are_the_formatted_ones(
            n in prop_oneof![0u64..1000, any::<u64>()],
            width in 0usize..24,
            parts in proptest::collection::vec("[a-z/0-9é-]{0,6}", 0..6),
        ) {
            let (plain, padded) = (Digits::of(n), Digits::padded(n, width));
            prop_assert_eq!(plain.as_str(), format!("{n}"));
            prop_assert_eq!(padded.as_str(), format!("{n:0width$}"));
            let formatted = format!("{n:0width$}");
            prop_assert_eq!(padded.as_bytes(), formatted.as_bytes());
            let mut pushed = String::from("uid-");
            padded.push_to(&mut pushed);
            prop_assert_eq!(pushed, format!("uid-{n:0width$}"));
            let small = digits(usize::try_from(n % 1_000_000).unwrap_or(0));
            prop_assert_eq!(small.as_str(), format!("{}", n % 1_000_000));
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let built = concat(&refs);
            prop_assert_eq!(&built, &parts.concat());
            prop_assert_eq!(built.capacity(), built.len());
        }
    }
}

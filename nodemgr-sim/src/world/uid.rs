//! The counter behind the uids the world gives its nodes and pods (`<name>-<counter>`, the
//! counter zero-padded to six digits): kept as its decimal digits and incremented in place,
//! so that a uid costs no division per digit ([`UidCounter`]). It writes what
//! `format!("{n:06}")` of the count writes (the property below).

/// The uid counter as zero-padded decimal digits (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct UidCounter {
    /// The digits, right-aligned; `buf[start..]` is the count (every digit of a `u64` fits).
    buf: [u8; 20],
    /// Where the digits start: at most `20 - WIDTH` (the padding), lower once the count has
    /// more digits.
    start: usize,
}

/// The padded width of the counter.
const WIDTH: usize = 6;

impl Default for UidCounter {
    /// Zero.
    fn default() -> Self {
        Self {
            buf: [b'0'; 20],
            start: 20 - WIDTH,
        }
    }
}

impl UidCounter {
    /// Adds one (the digits carry as in decimal; past `u64::MAX`'s 20 digits it stops).
    pub(super) fn increment(&mut self) {
        let mut i = self.buf.len();
        loop {
            if i == self.start {
                // Every digit was a 9: one more digit, a leading 1 (the rest are 0 now).
                if let Some(at) = self.start.checked_sub(1)
                    && let Some(d) = self.buf.get_mut(at)
                {
                    *d = b'1';
                    self.start = at;
                }
                return;
            }
            i -= 1;
            match self.buf.get_mut(i) {
                Some(d) if *d == b'9' => *d = b'0',
                Some(d) => {
                    *d += 1;
                    return;
                }
                None => return,
            }
        }
    }

    /// The count's digits, zero-padded to six, as ASCII bytes.
    pub(super) fn as_bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    /// `prefix-<digits>`, in one allocation of the exact size: the bytes copied, then checked
    /// as UTF-8 once (cheaper than pushing the digits as characters one by one).
    pub(super) fn uid(&self, prefix: &str) -> String {
        let digits = self.as_bytes();
        let mut bytes = Vec::with_capacity(prefix.len() + 1 + digits.len());
        bytes.extend_from_slice(prefix.as_bytes());
        bytes.push(b'-');
        bytes.extend_from_slice(digits);
        // A string, `-` and ASCII digits: always UTF-8.
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A counter at `n`, made the plain way (its digits written by `format!`).
    fn at(n: u64) -> UidCounter {
        let text = format!("{n:0WIDTH$}");
        let mut counter = UidCounter {
            buf: [b'0'; 20],
            start: 20 - text.len(),
        };
        counter.buf[counter.start..].copy_from_slice(text.as_bytes());
        counter
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// From any count (small ones, ones about to gain a digit, any `u64` short of the
        /// last), incremented up to 300 times: the uid is the formatted one at every step.
        #[test]
        fn the_counter_writes_the_formatted_count(
            n in prop_oneof![
                0u64..2_000,
                (3u32..20).prop_map(|e| 10u64.pow(e) - 150),
                0u64..u64::MAX - 400,
            ],
            steps in 0u64..300,
            prefix in "[a-z0-9-]{0,12}",
        ) {
            let mut counter = at(n);
            for k in 1..=steps {
                counter.increment();
                let plain = format!("{prefix}-{:0WIDTH$}", n + k);
                prop_assert_eq!(counter.uid(&prefix), plain);
            }
        }
    }

    /// From zero, as the world starts.
    #[test]
    fn the_counter_starts_at_zero() {
        let mut counter = UidCounter::default();
        assert_eq!(counter.uid("p"), "p-000000");
        counter.increment();
        assert_eq!(counter.uid("p"), "p-000001");
    }
}

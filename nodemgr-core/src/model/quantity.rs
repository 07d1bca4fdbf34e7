//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2`, `1e3`) as exact integers of
//! milli-units, so that CPU (millicores), memory (milli-bytes) and counts add up without floats.

use serde::{Deserialize, Serialize};

/// A quantity in thousandths of the base unit (1 CPU = 1000; 1 byte = 1000).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Quantity(pub i64);

/// Why a quantity string is not a quantity this crate can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not of the form number + optional suffix.
    #[error("{0:?} is not a Kubernetes quantity (examples: 100m, 2, 1.5Gi, 512Mi, 1e3)")]
    Malformed(String),
    /// Larger than a quantity can be here: about 9.2 × 10^15 base units (8 Pi).
    #[error(
        "{0:?} is too large: quantities up to about 9.2 × 10^15 base units (8Pi, 9200T) are accepted"
    )]
    TooLarge(String),
    /// More significant digits than can be computed with exactly.
    #[error("{0:?} has more than 38 significant digits; write it with fewer")]
    TooPrecise(String),
}

impl QuantityError {
    /// The text that failed.
    pub fn text(&self) -> &str {
        match self {
            Self::Malformed(t) | Self::TooLarge(t) | Self::TooPrecise(t) => t,
        }
    }
}

/// Most significant digits a mantissa may have (10^38 < i128::MAX).
const MAX_DIGITS: usize = 38;

/// The power of ten and the power of two a suffix multiplies by (`None`: not a suffix).
fn suffix_scale(suffix: &str) -> Option<(i64, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exp => {
            let exponent = exp.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // An exponent past ±10^7 over- or underflows like 10^7 does; keep the parse small.
            let significant = digits.trim_start_matches('0');
            let magnitude: i64 = if significant.len() > 7 {
                10_000_000
            } else if significant.is_empty() {
                0
            } else {
                significant.parse().ok()?
            };
            let value = if exponent.starts_with('-') {
                -magnitude
            } else {
                magnitude
            };
            (value, 0)
        }
    })
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);

    /// A whole number of base units (cores, bytes, pods).
    pub const fn units(n: i64) -> Self {
        Quantity(n.saturating_mul(1000))
    }

    /// Milli-units.
    pub const fn millis(n: i64) -> Self {
        Quantity(n)
    }

    /// Whole base units, rounded up.
    pub fn ceil_units(self) -> i64 {
        self.0.div_euclid(1000) + i64::from(self.0.rem_euclid(1000) != 0)
    }

    /// Parses a quantity string: an optional sign, digits with an optional fraction, then an
    /// optional suffix: a binary SI one (`Ki` … `Ei`), a decimal SI one (`n` … `E`), or a
    /// decimal exponent (`e3`, `E-2`). Sub-milli precision is rounded up, as Kubernetes rounds.
    /// Every step is checked; nothing here can overflow or panic.
    ///
    /// # Errors
    /// [`QuantityError::Malformed`] for anything else, [`QuantityError::TooLarge`] past
    /// `i64` milli-units, [`QuantityError::TooPrecise`] past 38 significant digits.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let malformed = || QuantityError::Malformed(text.to_owned());
        let too_large = || QuantityError::TooLarge(text.to_owned());
        let t = text.trim();
        let (negative, unsigned) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let split = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(split);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
            return Err(malformed());
        }
        let (exp10, shift) = suffix_scale(suffix).ok_or_else(malformed)?;
        // value = mantissa × 10^scale × 2^shift, in milli-units (hence the + 3).
        let frac_part = frac_part.trim_end_matches('0');
        let joined = format!("{int_part}{frac_part}");
        let mantissa_digits = joined.trim_start_matches('0');
        if mantissa_digits.is_empty() {
            return Ok(Quantity::ZERO);
        }
        if mantissa_digits.len() > MAX_DIGITS {
            // Past 38 significant digits the integer part alone overflows unless the digits
            // are mostly fraction; either way it is not a quantity anyone means.
            let integer_digits = int_part.trim_start_matches('0').len();
            return Err(if integer_digits > 19 {
                too_large()
            } else {
                QuantityError::TooPrecise(text.to_owned())
            });
        }
        let mantissa: i128 = mantissa_digits.parse().map_err(|_| malformed())?;
        let frac_len = i64::try_from(frac_part.len()).map_err(|_| malformed())?;
        let scale = exp10
            .checked_add(3)
            .and_then(|s| s.checked_sub(frac_len))
            .ok_or_else(too_large)?;
        let digits = i64::try_from(mantissa_digits.len()).map_err(|_| malformed())?;
        // The result has about `digits + scale` decimal digits before any binary factor:
        // beyond 40 it cannot fit an i64 (19 digits) even before the shift; far below zero it
        // rounds up to one milli-unit.
        if digits.saturating_add(scale) > 40 {
            return Err(too_large());
        }
        let value: i128 = if scale >= 0 {
            let power = 10i128
                .checked_pow(u32::try_from(scale).map_err(|_| too_large())?)
                .ok_or_else(too_large)?;
            mantissa
                .checked_mul(power)
                .and_then(|v| v.checked_mul(1i128 << shift))
                .ok_or_else(too_large)?
        } else if digits.saturating_add(scale) < -40 {
            // Far below a milli-unit: Kubernetes rounds any positive amount up to 1m.
            1
        } else {
            let numerator = mantissa
                .checked_mul(1i128 << shift)
                .ok_or_else(|| QuantityError::TooPrecise(text.to_owned()))?;
            let places = u32::try_from(scale.unsigned_abs()).map_err(|_| malformed())?;
            match 10i128.checked_pow(places) {
                // Round up like Kubernetes does for sub-milli precision.
                Some(denominator) => {
                    numerator / denominator + i128::from(numerator % denominator != 0)
                }
                // 10^places exceeds i128, so does not divide the numerator: under 1m.
                None => 1,
            }
        };
        let value = if negative { -value } else { value };
        i64::try_from(value).map(Quantity).map_err(|_| too_large())
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(rhs.0))
    }
}

impl std::ops::Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(rhs.0))
    }
}

impl std::ops::AddAssign for Quantity {
    fn add_assign(&mut self, rhs: Quantity) {
        *self = *self + rhs;
    }
}

impl std::ops::SubAssign for Quantity {
    fn sub_assign(&mut self, rhs: Quantity) {
        *self = *self - rhs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(Quantity::parse("100m"), Ok(Quantity(100)));
        assert_eq!(Quantity::parse("2"), Ok(Quantity(2000)));
        assert_eq!(Quantity::parse("0.5"), Ok(Quantity(500)));
        assert_eq!(Quantity::parse("1Ki"), Ok(Quantity(1024 * 1000)));
        assert_eq!(
            Quantity::parse("1.5Gi"),
            Ok(Quantity(1536 * 1024 * 1024 * 1000))
        );
        assert_eq!(Quantity::parse("1k"), Ok(Quantity(1_000_000)));
        assert_eq!(Quantity::parse("1e3"), Ok(Quantity(1_000_000)));
        assert_eq!(Quantity::parse("1n"), Ok(Quantity(1)));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "abc", "1.2.3", "5X", "Gi", ".", "+-1", "--1", "1e", "1e+", "1ee3", "1Ki3", "١",
            "1 Gi",
        ] {
            assert!(
                matches!(Quantity::parse(bad), Err(QuantityError::Malformed(_))),
                "{bad} should fail as malformed: {:?}",
                Quantity::parse(bad)
            );
        }
    }

    #[test]
    fn reads_signs_fractions_and_exponents_as_kubernetes_does() {
        assert_eq!(Quantity::parse("-100m"), Ok(Quantity(-100)));
        assert_eq!(Quantity::parse("+2"), Ok(Quantity(2000)));
        assert_eq!(Quantity::parse(".5"), Ok(Quantity(500)));
        assert_eq!(Quantity::parse("5."), Ok(Quantity(5000)));
        assert_eq!(Quantity::parse("1e-3"), Ok(Quantity(1)));
        assert_eq!(Quantity::parse("1E+2"), Ok(Quantity(100_000)));
        assert_eq!(Quantity::parse("0.0001"), Ok(Quantity(1)), "rounds up");
        assert_eq!(Quantity::parse("1e-99999"), Ok(Quantity(1)), "rounds up");
        assert_eq!(Quantity::parse("0e99999"), Ok(Quantity::ZERO));
        assert_eq!(
            Quantity::parse("000000000000000000000000000000000000000001"),
            Ok(Quantity(1000))
        );
        assert_eq!(
            Quantity::parse("1.000000000000000000000000000000000000000000"),
            Ok(Quantity(1000))
        );
        assert_eq!(
            Quantity::parse("8Pi"),
            Ok(Quantity(8 * (1i64 << 50) * 1000))
        );
    }

    #[test]
    fn too_large_quantities_are_refused_not_wrapped() {
        for big in [
            "1e99999",
            "9999999999999999999999999999999999999999999999",
            "99999999999999999999Ei",
            "16Ei",
            "9300T",
            "9223372036854775808",
            "-9223372036854775808",
            "1e9223372036854775807",
            "170141183460469231731687303715884105727E",
        ] {
            assert!(
                matches!(Quantity::parse(big), Err(QuantityError::TooLarge(_))),
                "{big}: {:?}",
                Quantity::parse(big)
            );
        }
        let e = Quantity::parse("99999999999999999999Ei").unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        assert_eq!(
            Quantity::parse("0.12345678901234567890123456789012345678901"),
            Err(QuantityError::TooPrecise(
                "0.12345678901234567890123456789012345678901".into()
            ))
        );
    }

    proptest::proptest! {
        /// Any text parses to a value or an error, never a panic; a value prints back to
        /// itself (integers of milli-units).
        #[test]
        fn any_text_is_a_value_or_an_error(text in "\\PC{0,60}") {
            let _ = Quantity::parse(&text);
        }

        /// Integers of milli-units round-trip exactly, up to the i64 bounds.
        #[test]
        fn milli_integers_round_trip(n in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(Quantity::parse(&format!("{n}m")), Ok(Quantity(n)));
        }

        /// Digits with any suffix or exponent give the exactly computed value, or TooLarge
        /// exactly when that value does not fit.
        #[test]
        fn scaled_integers_are_exact_or_too_large(
            n in 0u64..=u64::MAX,
            suffix in proptest::sample::select(vec!["", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e0", "e5", "e18", "e-2"]),
        ) {
            let exact: Option<i128> = match suffix {
                "" | "e0" => Some(1000),
                "k" => Some(1_000_000), "M" => Some(1_000_000_000), "G" => Some(1_000_000_000_000),
                "T" => Some(1_000_000_000_000_000), "P" => Some(1_000_000_000_000_000_000),
                "E" => Some(1_000_000_000_000_000_000_000),
                "Ki" => Some(1000 << 10), "Mi" => Some(1000 << 20), "Gi" => Some(1000 << 30),
                "Ti" => Some(1000 << 40), "Pi" => Some(1000 << 50), "Ei" => Some(1000 << 60),
                "e5" => Some(100_000_000), "e18" => Some(1_000_000_000_000_000_000_000),
                _ => None,
            };
            let parsed = Quantity::parse(&format!("{n}{suffix}"));
            match exact {
                Some(mul) => {
                    let value = i128::from(n).checked_mul(mul).and_then(|v| i64::try_from(v).ok());
                    match value {
                        Some(v) => proptest::prop_assert_eq!(parsed, Ok(Quantity(v))),
                        None => proptest::prop_assert!(matches!(parsed, Err(QuantityError::TooLarge(_)))),
                    }
                }
                None => {
                    // e-2: n/100 units = n × 10 milli-units.
                    let value = i128::from(n).checked_mul(10).and_then(|v| i64::try_from(v).ok());
                    match value {
                        Some(v) => proptest::prop_assert_eq!(parsed, Ok(Quantity(v))),
                        None => proptest::prop_assert!(matches!(parsed, Err(QuantityError::TooLarge(_)))),
                    }
                }
            }
        }
    }

    #[test]
    fn ceil_units_rounds_up() {
        assert_eq!(Quantity(1001).ceil_units(), 2);
        assert_eq!(Quantity(1000).ceil_units(), 1);
        assert_eq!(Quantity(0).ceil_units(), 0);
    }
}

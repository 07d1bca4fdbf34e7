//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2`, `1e3`) as exact integers of
//! milli-units, so that CPU (millicores), memory (milli-bytes) and counts add up without floats.

use serde::{Deserialize, Serialize};

/// A quantity in thousandths of the base unit (1 CPU = 1000; 1 byte = 1000).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Quantity(pub i64);

/// Why a quantity string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Kubernetes quantity (examples: 100m, 2, 1.5Gi, 512Mi, 1e3)")]
pub struct QuantityError(pub String);

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

    /// Parses a quantity string.
    ///
    /// # Errors
    /// A string that is not a number with an optional SI, binary or exponent suffix, or one
    /// that overflows.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError(text.to_owned());
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(t.len());
        let (number, suffix) = t.split_at(split);
        if number.is_empty() || number == "." {
            return Err(err());
        }
        let negative = number.starts_with('-');
        let digits = number.trim_start_matches(['+', '-']);
        let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
        if !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(err());
        }
        // value = mantissa / 10^scale
        let mantissa_text = format!("{int_part}{frac_part}");
        let mantissa: i128 = if mantissa_text.is_empty() {
            0
        } else {
            mantissa_text.parse().map_err(|_| err())?
        };
        let scale = frac_part.len() as u32;
        let (mul, div): (i128, i128) = match suffix {
            "" => (1000, 1),
            "n" => (1, 1_000_000),
            "u" => (1, 1000),
            "m" => (1, 1),
            "k" => (1_000_000, 1),
            "M" => (1_000_000_000, 1),
            "G" => (1_000_000_000_000, 1),
            "T" => (1_000_000_000_000_000, 1),
            "P" => (1_000_000_000_000_000_000, 1),
            "E" => (1_000_000_000_000_000_000_000, 1),
            "Ki" => (1000 << 10, 1),
            "Mi" => (1000 << 20, 1),
            "Gi" => (1000 << 30, 1),
            "Ti" => (1000 << 40, 1),
            "Pi" => (1000 << 50, 1),
            "Ei" => (1000 << 60, 1),
            exp if exp.starts_with(['e', 'E']) => {
                let e: u32 = exp[1..].parse().map_err(|_| err())?;
                (
                    1000i128
                        .checked_mul(10i128.checked_pow(e).ok_or_else(err)?)
                        .ok_or_else(err)?,
                    1,
                )
            }
            _ => return Err(err()),
        };
        let denominator = 10i128
            .checked_pow(scale)
            .ok_or_else(err)?
            .checked_mul(div)
            .ok_or_else(err)?;
        let numerator = mantissa.checked_mul(mul).ok_or_else(err)?;
        // Round up like Kubernetes does for sub-milli precision.
        let value = (numerator + denominator - 1) / denominator;
        let value = if negative { -value } else { value };
        i64::try_from(value).map(Quantity).map_err(|_| err())
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
        for bad in ["", "abc", "1.2.3", "5X", "Gi", "1e99999"] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn ceil_units_rounds_up() {
        assert_eq!(Quantity(1001).ceil_units(), 2);
        assert_eq!(Quantity(1000).ceil_units(), 1);
        assert_eq!(Quantity(0).ceil_units(), 0);
    }
}

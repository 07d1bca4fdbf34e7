//! A string enum that keeps values it does not know, so that a manifest with a typo still
//! parses and `validate` can name the field and the accepted values instead of failing early.

/// Declares a string enum with Deckhouse's exact spellings and an `Unknown(String)` catch-all.
///
/// The generated type serializes to and from its string spelling, implements `Display`, and
/// offers `as_str()`, `is_known()` and `KNOWN` (every accepted spelling, for error messages).
#[macro_export]
macro_rules! string_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this version of nodemgr does not know; `validate` reports it.
            Unknown(String),
        }

        impl $name {
            /// Every spelling the API accepts, in the order Deckhouse documents them.
            pub const KNOWN: &'static [&'static str] = &[$($text),+];

            /// The spelling used in manifests.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Unknown(other) => other.as_str(),
                }
            }

            /// The value spelled `text` (`Unknown` for a spelling the API does not accept).
            pub fn from_spelling(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)+
                    other => Self::Unknown(other.to_owned()),
                }
            }

            /// Whether the value is one the API accepts.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Unknown(_))
            }
        }

        #[cfg(feature = "schema")]
        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({"type": "string", "enum": [$($text),+]})
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(Self::from_spelling(s))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <::std::string::String as ::serde::Deserialize>::deserialize(deserializer)?;
                match text.parse() {
                    Ok(value) => Ok(value),
                    Err(never) => match never {},
                }
            }
        }
    };
}

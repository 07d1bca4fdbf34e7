//! StaticInstance and Instance: their served versions have one shape, so converting one
//! changes only its `apiVersion` (as Deckhouse's CRDs do with `conversion.strategy: None`).

/// StaticInstance's served versions, oldest first.
pub const STATIC_INSTANCE_VERSIONS: &[&str] = &["v1alpha1", "v1alpha2"];

/// Instance's served versions, oldest first (`v1alpha1` is kept for reading old objects;
/// Deckhouse no longer serves it).
pub const INSTANCE_VERSIONS: &[&str] = &["v1alpha1", "v1alpha2"];

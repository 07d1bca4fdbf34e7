//! Tests of the scaling executor over in-memory ports.

//! Embedding examples of nodemgr live in `examples/`, one file each, named object-then-verb;
//! run one with `cargo run -p nodemgr-examples --example NAME`. See `examples/README.md`.

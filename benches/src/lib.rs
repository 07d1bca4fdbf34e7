//! Builders of large synthetic clusters shared by the benchmarks in `benches/`.
//! Run every benchmark with `cargo bench -p nodemgr-benches`.

pub mod scaling_world;
pub mod scheduling_world;
pub mod update_world;

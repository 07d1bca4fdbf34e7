//! The subcommands of `nodemgr`, one file each, and the outcome they share.

use std::path::Path;
use std::process::ExitCode;

pub mod convert;
pub mod crds;
pub mod demo;
pub mod demo_agents;
pub mod explain;
pub mod render;
pub mod simulate;
pub mod validate;

/// How a subcommand ended, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Everything checked is fine: exit 0.
    Ok,
    /// Some input was read but is invalid: exit 1.
    Invalid,
    /// Some input could not be read at all (missing, not UTF-8, not YAML) or the output could
    /// not be written: exit 2.
    Unreadable,
}

impl Outcome {
    /// The outcome of a run that found `unreadable` inputs it could not read and `invalid`
    /// ones it read but refused: unreadable wins over invalid.
    pub fn of(unreadable: usize, invalid: usize) -> Self {
        if unreadable > 0 {
            Self::Unreadable
        } else if invalid > 0 {
            Self::Invalid
        } else {
            Self::Ok
        }
    }

    /// The process exit code of this outcome.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Self::Ok => ExitCode::SUCCESS,
            Self::Invalid => ExitCode::from(1),
            Self::Unreadable => ExitCode::from(2),
        }
    }
}

/// Why a file could not be read, with what to do about it.
pub fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read {}: {e}; check that the path exists and is readable",
            path.display()
        )
    })?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{} is not UTF-8 text (invalid byte at offset {}); save the manifest as UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

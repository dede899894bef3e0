//! The command line: one file per command group.

use std::process::ExitCode;

/// Parse the command line and run one command.
pub fn main() -> ExitCode {
    ExitCode::SUCCESS
}

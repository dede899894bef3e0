//! The `teamster` binary: parse the command line and run one command.

fn main() -> std::process::ExitCode {
    teamster::cli::main()
}

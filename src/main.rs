//! The `teamster` binary: parse the command line and run one command.
//!
//! Its allocator is jemalloc: in the load generator's small-jobs runs glibc's `malloc` and
//! `free` were 17 % of the machine's CPU (`docs/benchmarks.md`, "jemalloc").

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    teamster::cli::main()
}

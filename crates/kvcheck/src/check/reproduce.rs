//! How a report spells the command that replays a saved trace.
//!
//! In a checkout of the kvcheck workspace the binary is cargo's, and
//! `cargo run --release -p kvcheck -- replay …` builds and runs it; where
//! the binary came from the wheel (or `cargo install`) there is no
//! workspace and perhaps no cargo, only `kvcheck` on the PATH. Only the
//! entry point knows which: the `kvcheck` binary looks at where it runs
//! and says so once with [`ReplayProgram::use_everywhere`]. Library code
//! and the property suites run under cargo in a checkout and keep the
//! default.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The program a printed replay command runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayProgram {
    /// `cargo run --release -p kvcheck --`: in a checkout of the workspace.
    #[default]
    Cargo,
    /// `kvcheck`: the binary on the PATH (the wheel's, `cargo install`'s).
    Installed,
}

// One switch for the whole process, not a field of each divergence: every
// report prints the command (the run's, each worker's minimization,
// replay's, explore's), and divergences are built in many places that
// know nothing of where the program runs.
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl ReplayProgram {
    /// The words before `replay`.
    pub fn prefix(self) -> &'static str {
        match self {
            ReplayProgram::Cargo => "cargo run --release -p kvcheck --",
            ReplayProgram::Installed => "kvcheck",
        }
    }

    /// The program the reports of this process print (the default until
    /// [`ReplayProgram::use_everywhere`] says otherwise).
    pub fn current() -> ReplayProgram {
        if INSTALLED.load(Ordering::Relaxed) {
            ReplayProgram::Installed
        } else {
            ReplayProgram::Cargo
        }
    }

    /// Makes this the program every report of this process prints.
    pub fn use_everywhere(self) {
        INSTALLED.store(self == ReplayProgram::Installed, Ordering::Relaxed);
    }

    /// `PREFIX replay TRACE [--subject SUBJECT]`, the path and the subject
    /// quoted for a shell.
    pub fn command(self, trace: &Path, subject: Option<&str>) -> String {
        let mut command = format!(
            "{} replay {}",
            self.prefix(),
            shell_words::quote(&trace.display().to_string())
        );
        if let Some(subject) = subject {
            command.push_str(" --subject ");
            command.push_str(&shell_words::quote(subject));
        }
        command
    }
}

#[cfg(test)]
mod tests {
    use super::ReplayProgram;
    use std::path::Path;

    #[test]
    fn each_program_spells_its_command() {
        let trace = Path::new("kvcheck-failures/a b.kvtrace.json");
        assert_eq!(
            ReplayProgram::Installed.command(trace, Some("exec:python3 -m x")),
            "kvcheck replay 'kvcheck-failures/a b.kvtrace.json' --subject 'exec:python3 -m x'"
        );
        assert_eq!(
            ReplayProgram::Cargo.command(Path::new("t.kvtrace.json"), None),
            "cargo run --release -p kvcheck -- replay t.kvtrace.json"
        );
    }
}

//! Where `kvcheck` runs: inside a checkout of its own workspace, or
//! anywhere else (the wheel's binary in a user's project, `cargo
//! install`'s).
//!
//! A checkout is a folder, the working directory or one above it, that
//! holds a `Cargo.toml` and `crates/kvcheck/Cargo.toml`. There the reports
//! print `cargo run --release -p kvcheck -- replay …` (cargo finds the
//! workspace from any folder in it) and traces go to the checkout's
//! `target/kvcheck-failures`, beside cargo's builds. Anywhere else a
//! report prints `kvcheck replay …` and traces go to `kvcheck-failures/`
//! in the working directory: a user's project gets no `target/` folder
//! that cargo did not make.

use std::path::{Path, PathBuf};

use kvcheck::check::reproduce::ReplayProgram;
use kvcheck::settings::Settings;

/// Where traces go outside a checkout, under the working directory.
pub const OUTSIDE_FAILURES_DIR: &str = "kvcheck-failures";

/// Where the binary runs, as far as its defaults care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The path from the working directory up to the checkout's root
    /// (`""` at the root, `../..` two folders below it); `None` outside
    /// a checkout.
    up_to_root: Option<PathBuf>,
}

impl Place {
    /// The place of the working directory (outside a checkout when it
    /// cannot be read).
    pub fn detect() -> Place {
        match std::env::current_dir() {
            Ok(cwd) => Place::of(&cwd),
            Err(_) => Place { up_to_root: None },
        }
    }

    /// The place of `cwd`: inside the nearest checkout at or above it.
    pub fn of(cwd: &Path) -> Place {
        let up_to_root = cwd.ancestors().enumerate().find_map(|(depth, dir)| {
            let checkout = dir.join("Cargo.toml").is_file()
                && dir
                    .join("crates")
                    .join("kvcheck")
                    .join("Cargo.toml")
                    .is_file();
            checkout.then(|| (0..depth).map(|_| "..").collect::<PathBuf>())
        });
        Place { up_to_root }
    }

    /// Whether the working directory is inside a checkout.
    pub fn in_checkout(&self) -> bool {
        self.up_to_root.is_some()
    }

    /// The program the reports print for a replay.
    pub fn replay_program(&self) -> ReplayProgram {
        if self.in_checkout() {
            ReplayProgram::Cargo
        } else {
            ReplayProgram::Installed
        }
    }

    /// The default folder for the traces of divergences, relative to the
    /// working directory: in a checkout its `target/kvcheck-failures` (the
    /// settings' folder, which follows `$CARGO_TARGET_DIR`), else
    /// [`OUTSIDE_FAILURES_DIR`].
    pub fn failures_dir(&self, settings: &Settings) -> PathBuf {
        match &self.up_to_root {
            Some(up) => up.join(&settings.failures_dir),
            None => PathBuf::from(OUTSIDE_FAILURES_DIR),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kvcheck-place-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_folder_below_a_checkout_is_in_it() {
        let root = scratch("inside");
        std::fs::create_dir_all(root.join("crates/kvcheck")).unwrap();
        std::fs::create_dir_all(root.join("examples/python-cache")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[workspace]\n").unwrap();
        std::fs::write(root.join("crates/kvcheck/Cargo.toml"), "[package]\n").unwrap();
        let settings = Settings::default();
        let at_root = Place::of(&root);
        assert_eq!(at_root.replay_program(), ReplayProgram::Cargo);
        assert_eq!(
            at_root.failures_dir(&settings),
            PathBuf::from("target/kvcheck-failures")
        );
        let below = Place::of(&root.join("examples/python-cache"));
        assert!(below.in_checkout());
        assert_eq!(
            below.failures_dir(&settings),
            PathBuf::from("../../target/kvcheck-failures")
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_folder_without_the_workspace_is_outside() {
        let dir = scratch("outside");
        // A Cargo project of the user's own is not a kvcheck checkout.
        std::fs::write(dir.join("Cargo.toml"), "[package]\n").unwrap();
        let place = Place::of(&dir);
        assert!(!place.in_checkout(), "{}", dir.display());
        assert_eq!(place.replay_program(), ReplayProgram::Installed);
        assert_eq!(
            place.failures_dir(&Settings::default()),
            PathBuf::from("kvcheck-failures")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

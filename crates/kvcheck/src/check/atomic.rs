//! Files written whole or not at all, by concurrent writers.
//!
//! Test binaries run their suites on parallel threads and `cargo test`
//! may run several binaries at once, all saving failure traces and reports
//! under `target/`. Writing straight into the final path lets a reader (or
//! a second writer) see a half-written file; instead each write goes to a
//! temporary file whose name is unique to the process, thread and call,
//! then is renamed over the destination, which POSIX makes atomic.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary path beside `path`, unique to this process and call.
pub fn temporary_beside(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` atomically, creating the parent directories.
/// A concurrent reader sees the old file or the new one, never a mix; of
/// two concurrent writers, one file wins whole.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = temporary_beside(path);
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn concurrent_writers_leave_one_whole_file() {
        let dir = std::env::temp_dir().join(format!("kvcheck-atomic-{}", std::process::id()));
        let path = dir.join("shared.json");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let path = &path;
                s.spawn(move || {
                    let text = vec![b'a' + i; 100_000];
                    for _ in 0..5 {
                        super::write(path, &text).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len(), 100_000);
        assert!(text.iter().all(|&b| b == text[0]), "a mixed file");
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "temporary files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

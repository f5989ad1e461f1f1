//! The wings of the crate depend downwards only (`docs/architecture.md`):
//! `check` and `subject` name no `engine` path, `report` names neither an
//! engine path nor the CLI, `lib.rs` re-exports no module under a second
//! path, and no library file reads the environment (only `settings/` and
//! the CLI do). Read from the sources, so a new import that runs back up
//! fails here, naming the file and the line.

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Lines of the wing's files that name one of `forbidden` outside a
/// comment, as `file:line: text`.
fn offending(wing: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in sources(&src().join(wing)) {
        let text = fs::read_to_string(&file).expect("a readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if forbidden.iter().any(|f| code.contains(f)) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn check_and_subject_name_no_engine_path() {
    for wing in ["check", "subject"] {
        let found = offending(wing, &["crate::engine", "crate::cli", "kvcheck::engine"]);
        assert!(
            found.is_empty(),
            "{wing}/ imports upwards:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn report_names_no_engine_type() {
    let found = offending(
        "report",
        &["crate::engine", "crate::cli", "kvcheck::engine"],
    );
    assert!(
        found.is_empty(),
        "report/ imports upwards:\n{}",
        found.join("\n")
    );
}

/// Library code reads no environment variable: every knob is read once, by
/// `settings/` (`Settings::from_env`), where a program, test or bench
/// starts, and passed down as values. The CLI (`cli/`, `main.rs`) is such
/// an entry point. A new `env::var` in an engine, a subject or a check
/// fails here, naming the file and the line.
#[test]
fn only_settings_and_the_cli_read_the_environment() {
    let forbidden = ["env::var", "var_os"];
    let entry = |file: &Path| {
        let file = file.strip_prefix(src()).expect("a file under src");
        file.starts_with("settings") || file == Path::new("main.rs") || file.starts_with("cli")
    };
    let found = offending("", &forbidden);
    let settings = src().join("settings").join("mod.rs");
    assert!(
        found
            .iter()
            .any(|line| line.starts_with(&format!("{}:", settings.display()))),
        "the check finds the reads of settings/mod.rs: {found:?}"
    );
    let library: Vec<&String> = found
        .iter()
        .filter(|line| {
            let file = line.split(':').next().unwrap_or_default();
            !entry(Path::new(file))
        })
        .collect();
    assert!(
        library.is_empty(),
        "library code reads the environment (take the value from `kvcheck::settings::Settings` instead):\n{}",
        library
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The last segment of every item of every `pub use` statement of `text`
/// (statements may span lines; comments are skipped).
fn re_exported(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    let mut names = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let items = match path.split_once('{') {
            Some((_, items)) => items.trim_end_matches('}').to_string(),
            None => path.to_string(),
        };
        for item in items.split(',') {
            let item = item.split(" as ").last().unwrap_or_default().trim();
            if let Some(last) = item.rsplit("::").next().filter(|n| !n.is_empty()) {
                names.push(last.to_string());
            }
        }
    }
    names
}

#[test]
fn lib_re_exports_no_module_under_a_second_path() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let names = re_exported(&lib);
    assert!(
        names.len() >= 5,
        "the root vocabulary is re-exported: {names:?}"
    );
    // Types and traits at the root are vocabulary; a lower-case name
    // would be a module (or a function) under a second path.
    let modules: Vec<&String> = names
        .iter()
        .filter(|n| n.chars().next().is_some_and(|c| c.is_lowercase()))
        .collect();
    assert!(modules.is_empty(), "lib.rs re-exports modules: {modules:?}");
    // The check itself sees a flat alias.
    assert_eq!(
        re_exported("pub use engine::{\n    explain, // walk\n    minimize,\n};"),
        ["explain", "minimize"]
    );
}

/// The repository carries the documents it cites: the contract is
/// `docs/contract.md` and the trace format `docs/kvtrace.md`, and no file
/// points at a contract or format document kept outside it.
#[test]
fn no_file_cites_a_document_the_repository_lacks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for kept in ["docs/contract.md", "docs/kvtrace.md"] {
        assert!(root.join(kept).is_file(), "{kept} is missing");
    }
    // Spelled in pieces so that this file does not cite them itself.
    let outside = [concat!("SPEC", ".md"), concat!("TRACE", ".md")];
    let skipped = ["target", ".git", "node_modules", "corpus", "artifacts"];
    let texts = ["rs", "md", "py", "toml", "json", "sh", "yml", "yaml", "txt"];
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("a repository folder") {
            let path = entry.expect("a folder entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if !skipped.contains(&name.as_ref()) && !name.starts_with(".venv") {
                    stack.push(path);
                }
                continue;
            }
            let text_file = path
                .extension()
                .is_some_and(|e| texts.iter().any(|t| e == *t));
            let Some(text) = text_file.then(|| fs::read_to_string(&path).ok()).flatten() else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                if outside.iter().any(|o| line.contains(o)) {
                    found.push(format!("{}:{}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "cited but not in the repository:\n{}",
        found.join("\n")
    );
}

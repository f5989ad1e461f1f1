//! The wings of the crate depend downwards only (`docs/architecture.md`):
//! `check` and `subject` name no `engine` path, `report` names neither an
//! engine path nor the CLI, `lib.rs` re-exports no module under a second
//! path, and no library file reads the environment (only `settings/` and
//! the CLI do). Read from the sources, so a new import that runs back up
//! fails here, naming the file and the line. The file-level import graph
//! has no circle, and no file imports from a floor above its own
//! (`floor`: settings and codec, subject, check, strategy, oracle, case,
//! report, engines, cli).

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

/// Every item of every `pub use` statement of `text` (statements may span
/// lines; comments are skipped): its path as written and the name it binds.
fn pub_uses(text: &str) -> Vec<(Vec<String>, String)> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    code.split(';')
        .filter_map(|statement| {
            let mut statement = statement.trim();
            // Attributes before the statement (`#[allow(...)]`).
            while let Some(rest) = statement.strip_prefix("#[") {
                statement = rest.split_once(']').map_or("", |(_, after)| after).trim();
            }
            statement
                .strip_prefix("pub use ")
                .or_else(|| statement.strip_prefix("pub(crate) use "))
        })
        .flat_map(expand)
        .collect()
}

/// The name every item of every `pub use` statement of `text` binds.
fn re_exported(text: &str) -> Vec<String> {
    pub_uses(text).into_iter().map(|(_, name)| name).collect()
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

/// A source file's module path under `src/` (`engine/oracle/mod.rs` is
/// `engine::oracle`, `check/payload.rs` is `check::payload`); `lib.rs`
/// and `main.rs` are the root.
fn module_of(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src()).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of `text` that the import graph reads: comments dropped, and
/// nothing from the first `#[cfg(test)]` on (a file's own test module,
/// whose `super::` is the file itself).
fn graph_code(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a use tree (`a::{b, c::{d, e as f}}`) into its paths, each
/// with the name it binds (the `as` name or the last segment).
fn expand(tree: &str) -> Vec<(Vec<String>, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), Some(alias.trim().to_string())),
            None => (tree, None),
        };
        let segments: Vec<String> = path
            .split("::")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let name = alias
            .or_else(|| segments.last().cloned())
            .unwrap_or_default();
        return vec![(segments, name)];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().filter(|i| !i.trim().is_empty()) {
        for (mut segments, name) in expand(item) {
            if segments.first().is_some_and(|s| s == "self") {
                segments.remove(0);
            }
            let mut path = prefix.clone();
            path.extend(segments);
            let name = if name == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.push((path, name));
        }
    }
    out
}

/// Every path `code` names from the crate (`crate::`, `kvcheck::`,
/// `super::`, `self::`, and a `use` of a child module), expanded, as
/// written.
fn named_paths(code: &str, children: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let starts = ["crate::", "kvcheck::", "super::", "self::"];
    let mut i = 0;
    while i < code.len() {
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rest = &code[i..];
        let starts_use = rest.starts_with("use ") && boundary;
        if boundary && (starts.iter().any(|s| rest.starts_with(s)) || starts_use) {
            let from = if starts_use { i + 4 } else { i };
            // The path: identifiers, `::`, and one balanced brace group.
            let (mut end, mut depth) = (from, 0);
            for (j, c) in code[from..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    c if depth > 0 || c.is_alphanumeric() || c == '_' || c == ':' => {}
                    _ => {
                        end = from + j;
                        break;
                    }
                }
                end = from + j + c.len_utf8();
            }
            let tree = code[from..end].trim_end_matches(':');
            for (path, _) in expand(tree) {
                let first = path.first().map(String::as_str).unwrap_or_default();
                if matches!(first, "crate" | "kvcheck" | "super" | "self")
                    || children.iter().any(|c| c == first)
                {
                    out.push(path);
                }
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
        while !code.is_char_boundary(i) {
            i += 1;
        }
    }
    out
}

/// Whether `code` defines an item named `name` or re-exports one under it.
fn defines(code: &str, name: &str) -> bool {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let kinds = [
        "fn", "struct", "enum", "const", "static", "type", "trait", "mod",
    ];
    words
        .windows(2)
        .any(|pair| kinds.contains(&pair[0]) && pair[1] == name)
        || pub_uses(code).iter().any(|(_, bound)| bound == name)
}

/// The crate's files, their modules, and for each module its file.
struct Crate {
    files: Vec<(PathBuf, Vec<String>, String)>,
}

impl Crate {
    fn read() -> Crate {
        let files = sources(&src())
            .into_iter()
            .filter(|f| !f.ends_with("main.rs"))
            .map(|f| {
                let text = fs::read_to_string(&f).expect("a readable source");
                let module = module_of(&f);
                (f, module, graph_code(&text))
            })
            .collect();
        Crate { files }
    }

    fn file_of(&self, module: &[String]) -> Option<usize> {
        self.files.iter().position(|(_, m, _)| m == module)
    }

    fn children(&self, module: &[String]) -> Vec<String> {
        self.files
            .iter()
            .filter(|(_, m, _)| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|(_, m, _)| m[module.len()].clone())
            .collect()
    }

    /// The path made absolute from `module`: `crate::`/`kvcheck::` from
    /// the root, `super::` and `self::` from `module`, a child module's
    /// name from `module`.
    fn absolute(&self, module: &[String], path: &[String]) -> Vec<String> {
        let mut base = module.to_vec();
        let mut rest = path;
        match path.first().map(String::as_str) {
            Some("crate" | "kvcheck") => {
                base.clear();
                rest = &path[1..];
            }
            Some("self") => rest = &path[1..],
            _ => {}
        }
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        base
    }

    /// The file that defines what `path` (absolute) names: the deepest
    /// module file on the path, following a `pub use` there that binds
    /// the next segment.
    fn resolve(&self, path: &[String], depth: usize) -> Option<usize> {
        let (at, file) = (0..=path.len())
            .rev()
            .find_map(|n| self.file_of(&path[..n]).map(|f| (n, f)))?;
        let Some(next) = path.get(at) else {
            return Some(file);
        };
        if depth < 8 {
            let (_, module, code) = &self.files[file];
            for (source, name) in pub_uses(code) {
                let mut target = self.absolute(module, &source);
                if name == "*" {
                    // A glob: `next` comes through it when the module it
                    // names defines or re-exports `next`.
                    target.pop();
                    let Some(glob) = self.file_of(&target) else {
                        continue;
                    };
                    if !defines(&self.files[glob].2, next) {
                        continue;
                    }
                    target.push(next.clone());
                } else if &name != next {
                    continue;
                }
                target.extend(path[at + 1..].iter().cloned());
                if let Some(found) = self.resolve(&target, depth + 1) {
                    return Some(found);
                }
            }
        }
        Some(file)
    }

    /// Each file's imports of the crate's other files (`use` and inline
    /// paths), as indexes into `files`.
    fn edges(&self) -> Vec<Vec<usize>> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, (_, module, code))| {
                let children = self.children(module);
                let mut out: Vec<usize> = named_paths(code, &children)
                    .iter()
                    .filter_map(|p| self.resolve(&self.absolute(module, p), 0))
                    .filter(|&j| j != i)
                    .collect();
                out.sort();
                out.dedup();
                out
            })
            .collect()
    }

    fn name(&self, i: usize) -> String {
        self.files[i]
            .0
            .strip_prefix(src())
            .expect("a file under src")
            .display()
            .to_string()
    }

    /// The index of the file `name` (relative to `src/`).
    fn index(&self, name: &str) -> usize {
        (0..self.files.len())
            .find(|&i| self.name(i) == name)
            .unwrap_or_else(|| panic!("no file {name} under src"))
    }
}

/// The strongly connected components of more than one file (Tarjan's
/// algorithm, iterative), each sorted, largest first.
fn circles(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack, mut next, mut out) = (vec![false; n], Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    out.push(component);
                }
            }
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    out
}

/// `settings/` is a leaf: it names no engine, subject or check path, so
/// every wing can take its values (the engines their defaults, an oracle
/// and a subject their options through `Oracle::with_settings` and
/// `SubjectSpec::with_settings`) without a circle.
#[test]
fn settings_is_a_leaf() {
    let found = offending(
        "settings",
        &[
            "crate::engine",
            "crate::check",
            "crate::subject",
            "crate::cli",
            "kvcheck::engine",
        ],
    )
    .into_iter()
    .filter(|line| !line.contains("/tests.rs:"))
    .collect::<Vec<_>>();
    assert!(
        found.is_empty(),
        "settings/ imports upwards:\n{}",
        found.join("\n")
    );
}

/// The floor of a file in the order the crate is built up in, bottom to
/// top: settings and the tensor codec, subjects, the lockstep driver and
/// its checks, the strategies (which draw a `Case`), the oracle with its
/// relations and invariants, the one case runner (`engine/case.rs`), the
/// report rows, the engines, the command line. `None` for the crate root.
///
/// The report rows sit below the engines that fill them: `report/` is the
/// JSON a campaign, a shard or a power run writes and `kvcheck merge`
/// reads back, so it names no engine type (`report_names_no_engine_type`)
/// and a change inside an engine cannot change a file format.
fn floor(name: &str) -> Option<usize> {
    let floors: [&[&str]; 9] = [
        &["settings/", "codec.rs"],
        &["subject/"],
        &["check/"],
        &["engine/strategy/"],
        &["engine/oracle/", "engine/relation/", "engine/invariant/"],
        &["engine/case.rs"],
        &["report/"],
        &["engine/"],
        &["cli/"],
    ];
    floors
        .iter()
        .position(|prefixes| prefixes.iter().any(|p| name.starts_with(p)))
}

/// The imports of `edges` that run from a lower floor to a higher one, as
/// `from -> to`. A file's unit tests (`tests.rs`) may use anything.
fn upward(krate: &Crate, edges: &[Vec<usize>]) -> Vec<String> {
    let mut found = Vec::new();
    for (from, targets) in edges.iter().enumerate() {
        let (a, name) = (floor(&krate.name(from)), krate.name(from));
        if name.ends_with("/tests.rs") {
            continue;
        }
        for &to in targets {
            if let (Some(a), Some(b)) = (a, floor(&krate.name(to))) {
                if b > a {
                    found.push(format!("{name} -> {}", krate.name(to)));
                }
            }
        }
    }
    found.sort();
    found
}

/// No file imports from a floor above its own (`floor`).
#[test]
fn no_upward_imports() {
    let krate = Crate::read();
    let edges = krate.edges();
    let found = upward(&krate, &edges);
    assert!(
        found.is_empty(),
        "imports from a higher floor (import from below instead, or move the item down):\n{found:#?}"
    );
    // The check sees an upward edge where there is one: the oracle naming
    // the case runner would be one.
    let (oracle, case) = (
        krate.index("engine/oracle/mod.rs"),
        krate.index("engine/case.rs"),
    );
    let mut planted = edges.clone();
    planted[oracle].push(case);
    assert_eq!(
        upward(&krate, &planted),
        ["engine/oracle/mod.rs -> engine/case.rs"]
    );
}

/// The tensor codec is a leaf: `codec.rs` names nothing of the crate, so
/// `subject/` and `check/` can both build on it without a circle.
#[test]
fn the_codec_is_a_leaf() {
    let code = graph_code(&fs::read_to_string(src().join("codec.rs")).expect("codec.rs"));
    let named = named_paths(&code, &[]);
    assert!(
        named.is_empty(),
        "codec.rs imports from the crate: {named:?}"
    );
}

/// The import graph of `src/` (every `use` and inline path of the crate,
/// re-exports, glob ones included, followed to the file that defines the
/// item) has no circle: no two files import each other, directly or
/// around a loop.
#[test]
fn no_import_circles() {
    let krate = Crate::read();
    let edges = krate.edges();
    assert!(
        edges.iter().map(Vec::len).sum::<usize>() > 200,
        "the graph reads the crate's imports"
    );
    let found: Vec<Vec<String>> = circles(&edges)
        .iter()
        .map(|c| {
            let mut names: Vec<String> = c.iter().map(|&i| krate.name(i)).collect();
            names.sort();
            names
        })
        .collect();
    assert!(
        found.is_empty(),
        "import circles (untie them: move what both sides need below both):\n{found:#?}"
    );
}

/// The graph's reader on a file's worth of imports: nested use trees,
/// `self` in a group, aliases, `super::`, inline paths, and a `use` of a
/// child module.
#[test]
fn the_import_reader_expands_use_trees() {
    let code = "use crate::check::{lockstep::{Lockstep, view::View as V}, payload::{self, Kv}};\n\
                use super::sibling::Item;\n\
                use child::Thing;\n\
                fn f() { let x = crate::engine::case::run_case(c); let y = other::not_ours(); }";
    let paths = named_paths(code, &["child".to_string()]);
    let text: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        text,
        [
            "crate::check::lockstep::Lockstep",
            "crate::check::lockstep::view::View",
            "crate::check::payload",
            "crate::check::payload::Kv",
            "super::sibling::Item",
            "child::Thing",
            "crate::engine::case::run_case",
        ]
    );
    assert_eq!(expand("a::{b as c}")[0].1, "c");
    // A glob re-export behind an attribute, and what a glob brings.
    let globbed = pub_uses("#[allow(unused_imports)]\npub(crate) use process::*;");
    assert_eq!(
        globbed,
        [(
            vec!["process".to_string(), "*".to_string()],
            "*".to_string()
        )]
    );
    assert!(defines("pub struct Hello {}", "Hello"));
    assert!(!defines("fn hello() {}", "Hello"));
    // A circle of three and a lone self-loop-free pair.
    let edges = vec![vec![1], vec![2], vec![0], vec![4], vec![]];
    assert_eq!(circles(&edges), vec![vec![0, 1, 2]]);
}

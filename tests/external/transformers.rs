//! transformers' real caches (`adapters/transformers/`): the saved findings
//! and differences by design of `tests/external/transformers/`, replayed on
//! the unmasked adapter (see docs/transformers.md), and those of
//! `generate()` on its subject (`"script": "generate_subject.py"`, see
//! docs/transformers-generate.md). Opt-in: it runs only
//! where `adapters/transformers/setup.sh` has built its environment (the
//! marker `adapters/transformers/.venv/KVCHECK_READY`).

use crate::{holds_the_release, root, saved_traces_of_command};

#[test]
fn transformers_saved_traces_still_diverge() {
    let python = root().join("adapters/transformers/.venv/bin/python");
    let marker = root().join("adapters/transformers/.venv/KVCHECK_READY");
    if !(python.exists() && marker.exists()) {
        eprintln!(
            "skipped: the transformers environment is absent; \
             run `adapters/transformers/setup.sh` to enable this test"
        );
        return;
    }
    if !holds_the_release("transformers", &marker) {
        return;
    }
    let command = format!(
        "exec:{} {}",
        python.display(),
        root().join("adapters/transformers/{script}").display()
    );
    saved_traces_of_command("transformers", "tests/external/transformers", &command);
}

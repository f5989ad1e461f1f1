//! vllm-omni's LingBot-World cache (`adapters/vllm-omni/`): the saved
//! differences by design of `tests/external/vllm-omni/`, replayed on the
//! unmasked adapter (see docs/vllm-omni.md). Opt-in: it runs only where
//! `adapters/vllm-omni/setup.sh` has built its environment (the marker
//! `adapters/vllm-omni/.vllm-omni/<version>/READY`); `VLLM_OMNI_VERSION`
//! picks the release (default 0.30.0).

use crate::{root, saved_traces_of_command};

#[test]
fn vllm_omni_saved_traces_still_diverge() {
    let version = std::env::var("VLLM_OMNI_VERSION").unwrap_or_else(|_| "0.30.0".to_string());
    let python = root().join("adapters/vllm-omni/.venv/bin/python");
    let marker = root().join(format!("adapters/vllm-omni/.vllm-omni/{version}/READY"));
    if !(python.exists() && marker.exists()) {
        eprintln!(
            "skipped: the vllm-omni {version} environment is absent; \
             run `VLLM_OMNI_VERSION={version} adapters/vllm-omni/setup.sh` to enable this test"
        );
        return;
    }
    let command = format!(
        "exec:{} {} --version {version}",
        python.display(),
        root().join("adapters/vllm-omni/subject.py").display()
    );
    saved_traces_of_command("vllm-omni", "tests/external/vllm-omni", &command);
}

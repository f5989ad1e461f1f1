//! A toy subject kind, as another crate would add one: `toy:FAULT` is the
//! shipped cache with a fault of the zoo (`toy:none` without), registered
//! with [`kvcheck::subject::register`] so that its name prints and parses
//! back like a built-in form. One file: the kind and nothing else.

use kvcache::fault::CacheFault;
use kvcheck::subject::{register, Capabilities, Factory, Kind, KindArgs, SubjectSpec};

/// Makes `toy:…` a subject form for this process.
pub fn register_toy() {
    register(Kind {
        prefix: "toy",
        parse: toy,
    });
}

fn toy(args: &str) -> Result<Factory, KindArgs> {
    let fault = match args {
        "none" => None,
        name => Some(CacheFault::from_name(name).ok_or_else(|| KindArgs {
            expected: "none or the name of a fault of the zoo".to_string(),
        })?),
    };
    let inner = fault.map_or(SubjectSpec::Cache, SubjectSpec::CacheFault);
    let capabilities = inner
        .capabilities()
        .unwrap_or_else(|_| Capabilities::full());
    Ok(Factory::new(
        &format!("toy:{args}"),
        capabilities,
        move |config, device| inner.open(config, device),
    ))
}

//! A cache of the zoo (`kvcache::fault`) vs. the model, op by op: measures
//! how fast coverage-guided fuzzing finds a realistic bug. The fault is
//! named by the environment variable `KVCHECK_FAULT` (`kvcheck power
//! --engine fuzz` sets it), and the cache it is injected into by
//! `KVCHECK_FAULT_BASE` (`shipped`, the default, `generic` or `ring`); a
//! divergence panics with the report.
#![no_main]

use std::sync::OnceLock;

use kvcache::fault::{CacheFault, FaultBase};
use kvcheck::engine::fuzzcase::check_fault_on;
use libfuzzer_sys::fuzz_target;

fn fault() -> (CacheFault, FaultBase) {
    static FAULT: OnceLock<(CacheFault, FaultBase)> = OnceLock::new();
    *FAULT.get_or_init(|| {
        let name = std::env::var("KVCHECK_FAULT").unwrap_or_default();
        let Some(fault) = CacheFault::from_name(&name) else {
            eprintln!(
                "fault_lockstep: KVCHECK_FAULT={name:?} names no fault; expected one of {}",
                CacheFault::ALL.map(CacheFault::name).join(", ")
            );
            std::process::exit(2);
        };
        let base = std::env::var("KVCHECK_FAULT_BASE").unwrap_or_default();
        let base = if base.is_empty() {
            FaultBase::Shipped
        } else {
            match base.parse::<FaultBase>() {
                Ok(base) if base.holds(fault.variant()) => base,
                Ok(base) => {
                    eprintln!("fault_lockstep: {fault} cannot be injected into {base}");
                    std::process::exit(2);
                }
                Err(e) => {
                    eprintln!("fault_lockstep: KVCHECK_FAULT_BASE: {e}");
                    std::process::exit(2);
                }
            }
        };
        (fault, base)
    })
}

fuzz_target!(|data: &[u8]| {
    let (fault, base) = fault();
    if let Err(report) = check_fault_on(fault, base, data) {
        panic!("{report}");
    }
});

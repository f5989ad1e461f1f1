//! A cache of the zoo (`kvcache::fault`) vs. the model, op by op: measures
//! how fast coverage-guided fuzzing finds a realistic bug. The fault is
//! named by the environment variable `KVCHECK_FAULT` (`kvcheck power
//! --engine fuzz` sets it); a divergence panics with the report.
#![no_main]

use std::sync::OnceLock;

use kvcheck::fuzzcase::check_fault;
use kvcache::fault::CacheFault;
use libfuzzer_sys::fuzz_target;

fn fault() -> CacheFault {
    static FAULT: OnceLock<CacheFault> = OnceLock::new();
    *FAULT.get_or_init(|| {
        let name = std::env::var("KVCHECK_FAULT").unwrap_or_default();
        match CacheFault::from_name(&name) {
            Some(fault) => fault,
            None => {
                eprintln!(
                    "fault_lockstep: KVCHECK_FAULT={name:?} names no fault; expected one of {}",
                    CacheFault::ALL.map(CacheFault::name).join(", ")
                );
                std::process::exit(2);
            }
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if let Err(report) = check_fault(fault(), data) {
        panic!("{report}");
    }
});

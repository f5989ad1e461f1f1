//! The harness's integration tests, one binary: each module is one concern
//! (a file per engine, format or subject kind), so a change relinks one
//! test executable instead of one per file. Filter by module:
//! `cargo test -p kvcheck --test harness zoo::`.

mod capabilities;
mod cli;
mod cli_support;
mod domains;
mod exec_reports;
mod exec_subject;
mod explain;
mod explore;
mod extension;
mod layers;
mod minimize;
mod one_call;
mod power_scale;
mod prefix;
mod prefix_subjects;
mod prefix_windows;
mod relations;
mod reproduce;
mod scale;
mod segments;
mod toy_oracle;
mod toy_subject;
mod trace_format;
mod triage;
mod value_check;
mod zoo;

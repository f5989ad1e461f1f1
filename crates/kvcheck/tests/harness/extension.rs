//! The engines take an oracle and a subject kind they were not written
//! with: a toy oracle (`toy_oracle.rs`) and a toy subject kind
//! (`toy_subject.rs`), each in one file, through `run` (the campaign),
//! `minimize` and `replay`.

use std::time::Duration;

use kvcheck::engine::minimize::minimize_with;
use kvcheck::engine::oracle::Oracle;
use kvcheck::engine::replay::replay_with;
use kvcheck::engine::scale::Campaign;
use kvcheck::engine::strategy::PROFILES;
use kvcheck::report::shard::Shard;
use kvcheck::subject::SubjectSpec;

use crate::toy_oracle::OutcomesOnly;
use crate::toy_subject::register_toy;

#[test]
fn a_toy_subject_kind_prints_and_parses_back() {
    register_toy();
    let subject = SubjectSpec::parse("toy:gap-write-accepted").expect("a registered kind");
    assert_eq!(subject.to_string(), "toy:gap-write-accepted");
    assert_eq!(
        SubjectSpec::parse(&subject.to_string())
            .unwrap()
            .to_string(),
        subject.to_string()
    );
    let refused = SubjectSpec::parse("toy:no-such-fault").unwrap_err();
    assert!(
        refused.to_string().contains("none or the name of a fault"),
        "{refused}"
    );
}

#[test]
fn a_toy_oracle_and_a_toy_subject_run_minimize_and_replay() {
    register_toy();
    let oracle = Oracle::new(OutcomesOnly);
    assert!(!oracle.stepwise());
    let buggy = SubjectSpec::parse("toy:gap-write-accepted").unwrap();
    let profile = PROFILES.iter().position(|p| p.name == "sinks").unwrap();
    let campaign = |subject: SubjectSpec| Campaign {
        seed: 3,
        profiles: vec![profile],
        max_ops: 24,
        cases: Some(60),
        budget: Duration::from_secs(120),
        jobs: 1,
        shard: Shard::ALL,
        subject,
        oracle: oracle.clone(),
    };
    // run
    let found = campaign(buggy.clone())
        .run(None)
        .expect("the campaign runs")
        .found
        .expect("the toy oracle finds the gap write");
    let divergence = found.divergence;
    assert!(
        divergence.subject.contains("toy:gap-write-accepted"),
        "{divergence}"
    );
    // minimize
    let small = minimize_with(&divergence.trace, buggy.clone(), &oracle, 400)
        .expect("the divergence minimizes against the same oracle");
    assert!(small.trace.ops.len() <= 3, "{}", small.trace);
    // replay, from the file form
    let again = kvcheck::check::trace::Trace::from_json(&small.trace.to_json()).unwrap();
    let replayed = replay_with(&again, None, Some(buggy), None, &oracle);
    assert!(replayed.divergence.is_some(), "the minimized trace replays");
    let clean = replay_with(
        &again,
        None,
        SubjectSpec::parse("toy:none").ok(),
        None,
        &oracle,
    );
    assert!(clean.divergence.is_none(), "the correct cache passes it");
    assert!(campaign(SubjectSpec::parse("toy:none").unwrap())
        .run(None)
        .expect("the campaign runs")
        .found
        .is_none());
}

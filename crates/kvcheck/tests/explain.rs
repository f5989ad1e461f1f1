//! The explainer walks a trace and stops at the first divergence with the
//! wrong rows decoded.

use kvcheck::explain::explain;
use kvcheck::subject::{Fault, SubjectSpec};
use kvcheck::trace::Trace;
use kvcheck::{Config, Op, Write};

fn stale_rewrite_trace() -> Trace {
    let mut config = Config::dense(4);
    config.sink = 1;
    config.heads = 2;
    Trace::new(
        config,
        vec![Op::Write(Write::new(0, 2)), Op::Write(Write::new(0, 2))],
    )
}

#[test]
fn explain_shows_strip_view_slots_and_the_decoded_divergence() {
    let subject = SubjectSpec::Fault(Fault::StaleRewrite);
    let (text, divergence) = explain(&stale_rewrite_trace(), subject, false).unwrap();
    assert_eq!(divergence.unwrap().step, 1);
    assert!(text.contains("step 0: write 0+2"), "{text}");
    assert!(text.contains("strip   Sv\n"), "{text}");
    assert!(text.contains("slots   [0 1]"), "{text}");
    assert!(text.contains("values divergence at step 1"), "{text}");
    assert!(
        text.contains("op 1 at position 0 head 0") && text.contains("| op 0 at position 0 head 0"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour off a TTY");
}

#[test]
fn explain_of_a_clean_trace_says_so() {
    let (text, divergence) =
        explain(&stale_rewrite_trace(), SubjectSpec::Reference, false).unwrap();
    assert!(divergence.is_none());
    assert!(text.contains("no divergence: reference matches the model on all 2 ops"));
}

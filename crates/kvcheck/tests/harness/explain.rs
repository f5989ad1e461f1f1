//! The explainer walks a trace and stops at the first divergence with the
//! wrong rows decoded.

use kvcheck::check::trace::Trace;
use kvcheck::engine::explain::html::render_html;
use kvcheck::engine::explain::{explain, walk};
use kvcheck::subject::{Fault, SubjectSpec};
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
    assert!(text.contains("pos 0 head 0 in slot 0: "), "{text}");
    assert!(!text.contains('\x1b'), "no colour off a TTY");
}

#[test]
fn explain_of_a_clean_trace_says_so() {
    let (text, divergence) =
        explain(&stale_rewrite_trace(), SubjectSpec::Reference, false).unwrap();
    assert!(divergence.is_none());
    assert!(text.contains("no divergence: reference matches the model on all 2 ops"));
}

fn stale_rewrite_after_eviction_trace() -> Trace {
    let mut config = Config::dense(8);
    config.sink = 2;
    config.heads = 2;
    let w = |s, n| Op::Write(Write::new(s, n));
    Trace::new(
        config,
        vec![
            w(0, 3),
            w(3, 3),
            w(6, 3),
            Op::Evict { tokens: 2 },
            w(9, 3),
            w(9, 3),
            w(12, 2),
        ],
    )
}

#[test]
fn explain_html_is_a_self_contained_grid_with_the_divergence_marked() {
    let trace = stale_rewrite_after_eviction_trace();
    let walk = walk(&trace, SubjectSpec::Fault(Fault::StaleRewrite)).unwrap();
    let step = walk.divergence.as_ref().unwrap().step;
    assert_eq!(step, 5);
    assert_eq!(walk.steps.len(), step + 1);
    let html = render_html(&walk);
    // The divergence row is marked and explained.
    assert_eq!(html.matches("id=\"divergence\"").count(), 1, "{html}");
    assert!(html.contains("values divergence at step 5"), "{html}");
    assert!(html.contains("class=\"c visible written wrong\""), "{html}");
    // One row per step run.
    assert_eq!(html.matches("<tr class=\"step").count(), step + 1, "{html}");
    // Writers per head on hover, and the evicted positions.
    assert!(
        html.contains("title=\"position 9 · head 0 written by op 5 · head 1 written by op 5 · visible · written this step"),
        "{html}"
    );
    assert!(html.contains("class=\"c evicted\""), "{html}");
    assert!(html.contains("class=\"c sink\""), "{html}");
    // Self-contained.
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    assert!(!html.contains("<link") && !html.contains("src="), "{html}");
    // Well-formed enough: balanced tags.
    for tag in ["table", "tr", "td", "thead", "tbody", "div", "html", "body"] {
        let open =
            html.matches(&format!("<{tag}>")).count() + html.matches(&format!("<{tag} ")).count();
        let close = html.matches(&format!("</{tag}>")).count();
        assert_eq!(open, close, "<{tag}> opened {open} closed {close}");
    }
}

#[test]
fn explain_html_escapes_text() {
    let mut trace = stale_rewrite_after_eviction_trace();
    trace.note = Some("<script>alert('x') & \"y\"</script>".to_string());
    let html = render_html(&walk(&trace, SubjectSpec::Reference).unwrap());
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"));
    assert!(html.contains("no divergence"), "{html}");
}

/// On the ring cache every step shows the ring: head, tail and where the
/// positions wrap around the buffer.
#[test]
fn explain_shows_the_ring_head_tail_and_wrap() {
    let mut config = Config::dense(6);
    config.sink = 1;
    let w = |s, n| Op::Write(Write::new(s, n));
    let trace = Trace::new(config, vec![w(0, 4), w(4, 2), w(6, 2)]);
    let (text, divergence) = explain(&trace, SubjectSpec::Ring, false).unwrap();
    assert!(divergence.is_none(), "{text}");
    // [0, 6) fills slots 0..6; [6, 8) evicts 1 and 2 and takes their slots.
    assert!(text.contains("slots   [0 6 7 3 4 5]"), "{text}");
    assert!(
        text.contains("ring    head slot 3, tail slot 3, wraps at position 6"),
        "{text}"
    );
    assert!(
        text.contains("ring    head slot 1, tail slot 0, no wrap"),
        "{text}"
    );
    let html = render_html(&walk(&trace, SubjectSpec::Ring).unwrap());
    assert!(
        html.contains("head slot 3, tail slot 3, wraps at position 6"),
        "{html}"
    );
}

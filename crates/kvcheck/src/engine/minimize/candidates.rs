//! The simpler candidates of one op, one argument and one configuration.

use kvmodel::{Config, Dtype, Op, PackedPolicy, Quant, Variant, Write};

/// Smaller values of `x` to try, best first: 0, half, x − 1.
pub(super) fn smaller(x: i64) -> Vec<i64> {
    let mut out = Vec::new();
    if x > 0 {
        for y in [0, x / 2, x - 1] {
            if y < x && !out.contains(&y) {
                out.push(y);
            }
        }
    } else if x < 0 {
        // A negative argument usually is the point (invalid_argument); try
        // the smallest negative number instead of dropping the sign.
        if x != -1 {
            out.push(-1);
        }
    }
    out
}

/// Simpler variants of one op, most aggressive first.
pub(super) fn simpler_ops(op: &Op) -> Vec<Op> {
    let mut out = Vec::new();
    match *op {
        Op::Write(w) => {
            if w.heads.is_some() {
                out.push(Op::Write(Write { heads: None, ..w }));
            }
            if let Some(r) = w.recent_window {
                out.push(Op::Write(Write {
                    recent_window: None,
                    ..w
                }));
                for r in smaller(r) {
                    out.push(Op::Write(Write {
                        recent_window: Some(r),
                        ..w
                    }));
                }
            }
            if let Some([first, count]) = w.heads {
                for first in smaller(first) {
                    out.push(Op::Write(Write {
                        heads: Some([first, count]),
                        ..w
                    }));
                }
                for count in smaller(count) {
                    out.push(Op::Write(Write {
                        heads: Some([first, count]),
                        ..w
                    }));
                }
            }
            for len in smaller(w.len) {
                out.push(Op::Write(Write { len, ..w }));
            }
            for start in smaller(w.start) {
                out.push(Op::Write(Write { start, ..w }));
            }
        }
        Op::Rewind { to } => out.extend(smaller(to).into_iter().map(|to| Op::Rewind { to })),
        Op::Evict { tokens } => out.extend(
            smaller(tokens)
                .into_iter()
                .map(|tokens| Op::Evict { tokens }),
        ),
        Op::Pin { tokens } => {
            out.extend(smaller(tokens).into_iter().map(|tokens| Op::Pin { tokens }))
        }
        Op::Reset => {}
    }
    out
}

/// `op` with every position it names moved one down (never below 0).
pub(super) fn shift_down(op: &Op) -> Op {
    let down = |x: i64| if x > 0 { x - 1 } else { x };
    match *op {
        Op::Write(w) => Op::Write(Write {
            start: down(w.start),
            ..w
        }),
        Op::Rewind { to } => Op::Rewind { to: down(to) },
        other => other,
    }
}

/// Accessor of one numeric config field.
pub(super) type FieldOf = fn(&mut Config) -> &mut usize;

/// Simpler variants of `config`, one field changed each; invalid ones are
/// filtered out by the caller through [`Config::validate`].
pub(super) fn simpler_configs(c: &Config) -> Vec<Config> {
    let mut out = Vec::new();
    let mut push = |f: &dyn Fn(&mut Config)| {
        let mut next = c.clone();
        f(&mut next);
        if next != *c && next.validate().is_ok() {
            out.push(next);
        }
    };
    push(&|n| n.dtype = Dtype::F32);
    // The default trim mode is the simpler contract (docs/contract.md §3).
    push(&|n| n.trim = kvmodel::Trim::BeforeRead);
    push(&|n| n.growth = false);
    push(&|n| n.window = None);
    push(&|n| n.seed = 0);
    if c.variant == Variant::Packed {
        let p = c.packed_policy();
        push(&|n| {
            n.packed = Some(PackedPolicy {
                quant: Quant::None,
                ..p
            })
        });
        push(&|n| {
            n.packed = Some(PackedPolicy {
                pack_sink: false,
                ..p
            })
        });
        for keep in smaller(p.keep_recent_chunks as i64) {
            push(&|n| {
                n.packed = Some(PackedPolicy {
                    keep_recent_chunks: keep as usize,
                    ..p
                })
            });
        }
    }
    let fields: [(FieldOf, usize); 6] = [
        (|n| &mut n.batch, 1),
        (|n| &mut n.head_dim, 1),
        (|n| &mut n.heads, 1),
        (|n| &mut n.global_sink, 0),
        (|n| &mut n.sink, 0),
        (|n| &mut n.capacity, 1),
    ];
    for (field, floor) in fields {
        let mut probe = c.clone();
        let value = *field(&mut probe);
        for v in smaller(value as i64) {
            let v = (v as usize).max(floor);
            push(&|n| {
                *field(n) = v;
                // Keep the window and sinks inside a smaller capacity.
                if let Some(w) = n.window {
                    if w > n.capacity {
                        n.window = Some(n.capacity);
                    }
                }
            });
        }
    }
    if let Some(w) = c.window {
        for v in smaller(w as i64) {
            push(&|n| n.window = Some(v as usize));
        }
    }
    out
}

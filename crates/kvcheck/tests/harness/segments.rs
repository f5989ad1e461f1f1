//! The driver checks segmented views: their concatenation bit for bit, and
//! that segments claiming to alias the cache really are `narrow`s of its
//! buffers at the slots its layout gives (a ring must not copy).

use candle_core::{Device, Tensor};
use kvcache::{KvCache, RingCache, RingLayout, SegmentedView, View};
use kvcheck::check::divergence::DivergenceKind;
use kvcheck::check::lockstep::Lockstep;
use kvcheck::{Config, Op, Write};

/// How the wrapped ring misreports its segments.
#[derive(Clone, Copy)]
enum Lie {
    /// Claims the slot after the real one.
    ShiftedSlot,
    /// Returns copies while laid out as a ring.
    Copies,
    /// Returns its rows flattened to one dimension.
    Flattened,
}

struct Misreporting(RingCache, Lie);

/// The view with its segments misreported as `lie` says.
fn distort(lie: Lie, mut view: SegmentedView<'_>) -> kvcache::Result<SegmentedView<'_>> {
    for side in [&mut view.k, &mut view.v] {
        for part in &mut side.parts {
            match lie {
                Lie::ShiftedSlot => part.slot = part.slot.map(|s| s + 1),
                Lie::Copies => {
                    part.rows = part.rows.copy()?;
                    part.slot = None;
                }
                Lie::Flattened => part.rows = part.rows.flatten_all()?,
            }
        }
    }
    Ok(view)
}

impl KvCache for Misreporting {
    fn config(&self) -> &Config {
        self.0.config()
    }
    fn global_end(&self) -> u64 {
        self.0.global_end()
    }
    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> kvcache::Result<View<'_>> {
        self.0.write(request, k, v)
    }
    fn view(&self) -> kvcache::Result<View<'_>> {
        self.0.view()
    }
    fn rewind(&mut self, to: i64) -> kvcache::Result<u64> {
        self.0.rewind(to)
    }
    fn evict(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.0.evict(tokens)
    }
    fn pin(&mut self, tokens: i64) -> kvcache::Result<u64> {
        self.0.pin(tokens)
    }
    fn reset(&mut self) -> kvcache::Result<u64> {
        self.0.reset()
    }
    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> kvcache::Result<SegmentedView<'_>> {
        let lie = self.1;
        distort(lie, self.0.write_segments(request, k, v)?)
    }
    fn ring(&self) -> Option<RingLayout> {
        self.0.ring()
    }

    fn internals(&self) -> Option<&dyn kvcache::Internals> {
        self.0.internals()
    }
}

fn run(lie: Lie) -> Option<DivergenceKind> {
    let mut config = Config::dense(6);
    config.sink = 1;
    let cache = RingCache::new(&config, &Device::Cpu).unwrap();
    let mut lockstep = Lockstep::with_cache(
        &config,
        Box::new(Misreporting(cache, lie)),
        "misreporting",
        &Device::Cpu,
    )
    .unwrap();
    let ops = [Op::Write(Write::new(0, 4)), Op::Write(Write::new(4, 3))];
    lockstep.run(&ops).err().map(|d| d.kind)
}

#[test]
fn a_segment_claiming_the_wrong_slot_is_an_aliasing_divergence() {
    assert_eq!(run(Lie::ShiftedSlot), Some(DivergenceKind::Aliasing));
}

#[test]
fn a_ring_that_copies_its_segments_is_an_aliasing_divergence() {
    assert_eq!(run(Lie::Copies), Some(DivergenceKind::Aliasing));
}

#[test]
fn a_segment_of_the_wrong_rank_is_a_shape_divergence() {
    assert_eq!(run(Lie::Flattened), Some(DivergenceKind::Shape));
}

#[test]
fn the_ring_itself_passes() {
    let mut config = Config::dense(6);
    config.sink = 1;
    let mut lockstep =
        Lockstep::open(&config, &kvcheck::subject::SubjectSpec::Ring, &Device::Cpu).unwrap();
    let ops = [
        Op::Write(Write::new(0, 4)),
        Op::Write(Write::new(4, 3)),
        Op::Write(Write::new(4, 3)),
    ];
    lockstep.run(&ops).unwrap();
}

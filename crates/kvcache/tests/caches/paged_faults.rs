//! The paged prefix cache's zoo of faults (feature `faults`): each planted
//! bug is caught by the lockstep check of `paged::Lockstep` (outcomes,
//! counts, rows), without the cache's own audit; once on a hand-written
//! sequence that shows the bug, and once by a random search with the
//! property suite's strategies, whose shrunk sequence is printed. Past its
//! divergence no fault panics: the bookkeeping it breaks gives wrong
//! answers only.
//!
//! `cargo test -p kvcache --features faults --test caches paged_faults::`

use candle_core::Device;
use kvcache::fault::{FaultyPagedCache, PrefixFault};
use kvcache::PrefixCache;
use kvmodel::prefix::{PrefixConfig, PrefixOp};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::paged::{compute, extend, start, Lockstep};
use super::paged_props::{configs, sequences};

/// The first divergence of `ops` on the faulty cache, if any.
fn divergence(config: &PrefixConfig, fault: PrefixFault, ops: &[PrefixOp]) -> Option<String> {
    let cache = FaultyPagedCache::new(config, &Device::Cpu, fault).unwrap();
    Lockstep::new(cache).run(ops, |i| i as u64).err()
}

/// A sequence that shows `fault` at its last op.
fn showcase(fault: PrefixFault) -> Vec<PrefixOp> {
    let computed = [start(0, &[1, 2, 3]), compute(0, 3)];
    let tail = match fault {
        // [2 1] sums like [1 2]: the weak hash finds it.
        PrefixFault::TrustWeakHash => vec![PrefixOp::Finish { request: 0 }, start(1, &[2, 1, 3])],
        // The fork shares the partial block [3]; extend must copy it.
        PrefixFault::SkipCopyOnWrite => vec![
            PrefixOp::Fork {
                request: 0,
                into: 1,
            },
            extend(1, &[4]),
        ],
        // The hit on [1 2] must take it out of the cached blocks.
        PrefixFault::HitStaysEvictable => {
            vec![PrefixOp::Finish { request: 0 }, start(1, &[1, 2, 3])]
        }
        // [4 5] is full but never computed: finish must free it.
        PrefixFault::CacheUncomputedBlock => {
            vec![start(1, &[4, 5, 6]), PrefixOp::Finish { request: 1 }]
        }
        // Back to [1 2], so 2 computed, but the cache still counts 3.
        PrefixFault::RollbackKeepsComputed => vec![
            PrefixOp::Rollback {
                request: 0,
                count: 1,
            },
            PrefixOp::Read { request: 0 },
        ],
        // The blocks preempt released are released again: free too high.
        PrefixFault::DoubleReleaseOnFinishAfterPreempt => vec![
            PrefixOp::Preempt { request: 0 },
            PrefixOp::Finish { request: 0 },
        ],
        // [1 2] is cached first, [4 5] last: evict must take [1 2], so
        // [4 5] still hits.
        PrefixFault::EvictIgnoresLru => vec![
            PrefixOp::Finish { request: 0 },
            start(1, &[4, 5, 6]),
            compute(1, 3),
            PrefixOp::Finish { request: 1 },
            PrefixOp::Evict { blocks: 1 },
            start(2, &[4, 5, 6]),
        ],
    };
    computed.into_iter().chain(tail).collect()
}

#[test]
fn every_fault_is_caught_at_the_op_that_shows_it() {
    let config = PrefixConfig::new(4, 2);
    for fault in PrefixFault::ALL {
        let ops = showcase(fault);
        let found = divergence(&config, fault, &ops)
            .unwrap_or_else(|| panic!("{fault} was not caught on {ops:?}"));
        let last = ops.len() - 1;
        assert!(
            found.starts_with(&format!("step {last} ")),
            "{fault}: {found}"
        );
        println!("{fault}: {found}");
        assert_eq!(PrefixFault::from_name(fault.name()), Some(fault));
        assert!(!fault.doc().is_empty());
    }
}

#[test]
fn every_fault_is_found_by_the_random_lockstep_search() {
    for fault in PrefixFault::ALL {
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(Config::with_cases(256), rng);
        let result = runner.run(
            &(configs(), sequences(40)),
            |(config, ops)| match divergence(&config, fault, &ops) {
                Some(found) => Err(TestCaseError::fail(found)),
                None => Ok(()),
            },
        );
        let failure = result.expect_err(&format!("no sequence caught {fault}"));
        println!("{fault}: {failure}");
    }
}

#[test]
fn no_fault_panics_past_its_divergence() {
    // A fault gives wrong answers, never a panic or a hang: every op of a
    // random sequence is answered, whatever the bookkeeping has become,
    // and every request's rows can be read after it.
    for fault in PrefixFault::ALL {
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(Config::with_cases(256), rng);
        let result = runner.run(&(configs(), sequences(60)), |(config, ops)| {
            let mut cache = FaultyPagedCache::new(&config, &Device::Cpu, fault).unwrap();
            for (i, op) in ops.iter().enumerate() {
                let _ = cache.apply(i as u64, op);
                for request in 0..4 {
                    let _ = cache.read_values(request);
                }
            }
            Ok(())
        });
        result.unwrap_or_else(|e| panic!("{fault}: {e}"));
    }
}

//! A cache that panics fails its case, not the run: [`Guarded`] catches a
//! panic of any op and answers it as [`SubjectFailure::Panicked`], which the
//! lockstep driver, the recorder and every engine above them report as a
//! divergence (kind `panic`) with a trace that minimizes like any other.
//!
//! Every subject is opened through it ([`SubjectSpec::open`]), so a cache
//! from another crate, the reference cache's faults and the shipped caches
//! are treated alike. A panic can leave the cache half-changed; the
//! divergence ends the case there, and a cache that panicked answers every
//! later op with the same failure rather than be asked again.
//!
//! [`SubjectSpec::open`]: super::SubjectSpec::open

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use candle_core::Tensor;
use kvcache::{Internals, KvCache, Result, RingLayout, SegmentedView, View};
use kvmodel::{Config, Write};

use super::SubjectFailure;

/// The message a panic carried (`panic!`'s text, or a placeholder naming
/// the payload's absence).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

thread_local! {
    /// Whether this thread is inside [`catching`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic caught on this thread was raised.
    static RAISED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static QUIET_HOOK: Once = Once::new();

/// Installs, once per process, a panic hook that keeps quiet about the
/// panics [`catching`] catches (a campaign and its minimizer may meet
/// thousands; the divergence reports each one it keeps, with where it was
/// raised) and hands every other panic to the hook that was there before.
fn quiet_caught_panics() {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let at = info.location().map(|l| l.to_string());
                RAISED_AT.with(|r| *r.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `call`, turning a panic into the subject's failure: its message
/// and where it was raised.
pub fn catching<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    quiet_caught_panics();
    let outer = CATCHING.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(call));
    CATCHING.with(|c| c.set(outer));
    result.unwrap_or_else(|payload| {
        let mut message = panic_message(payload.as_ref());
        if let Some(at) = RAISED_AT.with(|r| r.borrow_mut().take()) {
            message.push_str(&format!(" (at {at})"));
        }
        Err(SubjectFailure::Panicked { message }.into_cache_error())
    })
}

/// A cache whose panics are failures (see the module docs).
pub struct Guarded {
    inner: Box<dyn KvCache>,
    /// The message of the panic the cache raised, once it did.
    panicked: Option<String>,
}

impl Guarded {
    /// `inner`, its panics caught.
    pub fn new(inner: Box<dyn KvCache>) -> Guarded {
        Guarded {
            inner,
            panicked: None,
        }
    }

    /// The failure of a cache that panicked before: asked nothing more.
    fn poisoned(&self) -> Option<kvcache::Error> {
        self.panicked.as_ref().map(|message| {
            SubjectFailure::Panicked {
                message: format!("asked again after it panicked: {message}"),
            }
            .into_cache_error()
        })
    }

    /// `call` on the inner cache, a panic recorded and answered as a failure.
    fn guard<'a, T>(
        &'a mut self,
        call: impl FnOnce(&'a mut dyn KvCache) -> Result<T>,
    ) -> Result<T> {
        if let Some(error) = self.poisoned() {
            return Err(error);
        }
        let inner: &'a mut dyn KvCache = self.inner.as_mut();
        let result = catching(|| call(inner));
        if let Err(error) = &result {
            if let Some(SubjectFailure::Panicked { message }) = SubjectFailure::of(error) {
                self.panicked = Some(message.clone());
            }
        }
        result
    }
}

impl KvCache for Guarded {
    fn config(&self) -> &Config {
        self.inner.config()
    }

    fn global_end(&self) -> u64 {
        self.inner.global_end()
    }

    fn write(&mut self, request: &Write, k: &Tensor, v: &Tensor) -> Result<View<'_>> {
        self.guard(|cache| cache.write(request, k, v))
    }

    fn view(&self) -> Result<View<'_>> {
        if let Some(error) = self.poisoned() {
            return Err(error);
        }
        catching(|| self.inner.view())
    }

    fn rewind(&mut self, to: i64) -> Result<u64> {
        self.guard(|cache| cache.rewind(to))
    }

    fn evict(&mut self, tokens: i64) -> Result<u64> {
        self.guard(|cache| cache.evict(tokens))
    }

    fn pin(&mut self, tokens: i64) -> Result<u64> {
        self.guard(|cache| cache.pin(tokens))
    }

    fn reset(&mut self) -> Result<u64> {
        self.guard(|cache| cache.reset())
    }

    fn internals(&self) -> Option<&dyn Internals> {
        self.inner.internals()
    }

    fn write_segments(
        &mut self,
        request: &Write,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<SegmentedView<'_>> {
        self.guard(|cache| cache.write_segments(request, k, v))
    }

    fn view_segments(&self) -> Result<SegmentedView<'_>> {
        if let Some(error) = self.poisoned() {
            return Err(error);
        }
        catching(|| self.inner.view_segments())
    }

    fn ring(&self) -> Option<RingLayout> {
        self.inner.ring()
    }

    fn begin_op(&mut self, index: u64) {
        self.inner.begin_op(index)
    }
}

//! Storage of the packed cache: chunks, their resident pieces, and the
//! rows of each piece (hot, cold exact, or quantized); how a view is
//! assembled from them, how eviction trims them and how a chunk goes cold.

use std::ops::Range;

use candle_core::Tensor;
use kvmodel::Quant;

use super::PackedCache;
use crate::quant::{self, QuantizedTensor};
use crate::{Path, Result};

/// Rows of one piece.
#[derive(Clone, Debug)]
pub(super) enum Rows {
    /// Full precision, `[B, len, H, D]` K and V in the cache dtype.
    Hot { k: Tensor, v: Tensor },
    /// Cold with `quant = "none"`: exact values, moved to cold storage.
    ColdExact { k: Tensor, v: Tensor },
    /// Cold, quantized: codes `[B, len, H, bytes]`, scales `[B, len, H]`.
    Quantized {
        k: QuantizedTensor,
        v: QuantizedTensor,
    },
}

impl Rows {
    /// The rows `[from, from + len)` of the piece, deep-copied so that the
    /// rest of the storage can be freed.
    pub(super) fn trimmed(&self, from: usize, len: usize) -> candle_core::Result<Rows> {
        let cut = |t: &Tensor| t.narrow(1, from, len)?.force_contiguous();
        let cut_q = |t: &QuantizedTensor| t.narrow(1, from, len)?.copy();
        Ok(match self {
            Rows::Hot { k, v } => Rows::Hot {
                k: cut(k)?,
                v: cut(v)?,
            },
            Rows::ColdExact { k, v } => Rows::ColdExact {
                k: cut(k)?,
                v: cut(v)?,
            },
            Rows::Quantized { k, v } => Rows::Quantized {
                k: cut_q(k)?,
                v: cut_q(v)?,
            },
        })
    }

    pub(super) fn is_cold(&self) -> bool {
        !matches!(self, Rows::Hot { .. })
    }
}

/// Contiguous resident positions of one chunk and their rows.
#[derive(Clone, Debug)]
pub(super) struct Piece {
    pub(super) start: u64,
    pub(super) len: usize,
    pub(super) rows: Rows,
}

impl Piece {
    pub(super) fn range(&self) -> Range<u64> {
        self.start..self.start + self.len as u64
    }
}

/// One chunk: the range of one append (docs/contract.md §6), with the pieces that are
/// still resident (none once it is fully evicted; the chunk still counts for
/// the coldness rule).
#[derive(Clone, Debug)]
pub(super) struct Chunk {
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) cold: bool,
    pub(super) pieces: Vec<Piece>,
}

impl Chunk {
    pub(super) fn range(&self) -> Range<u64> {
        self.start..self.start + self.len
    }
}

/// Length of `a ∩ b`.
pub(super) fn overlap(a: &Range<u64>, b: &Range<u64>) -> u64 {
    a.end.min(b.end).saturating_sub(a.start.max(b.start))
}

impl PackedCache {
    /// Builds K and V of `positions` (two ascending runs) for `heads`.
    pub(super) fn assemble(
        &self,
        runs: &[Range<u64>; 2],
        heads: Range<usize>,
    ) -> Result<(Vec<u64>, Tensor, Tensor)> {
        let positions: Vec<u64> = runs.iter().flat_map(|r| r.clone()).collect();
        let c = &self.config;
        let shape = (c.batch, positions.len(), heads.len(), c.head_dim);
        let out_k = Tensor::zeros(shape, self.dtype, &self.device)?;
        let out_v = Tensor::zeros(shape, self.dtype, &self.device)?;
        let all_heads = heads.start == 0 && heads.end == c.heads;
        let mut offset = 0usize;
        for run in runs.iter().filter(|r| !r.is_empty()) {
            for chunk in self
                .chunks
                .iter()
                .filter(|ch| overlap(&ch.range(), run) > 0)
            {
                for piece in &chunk.pieces {
                    let span = piece.range();
                    let from = span.start.max(run.start);
                    let to = span.end.min(run.end);
                    if from >= to {
                        continue;
                    }
                    let (at, len) = ((from - span.start) as usize, (to - from) as usize);
                    let select = |t: &Tensor| -> candle_core::Result<Tensor> {
                        let t = t.narrow(1, at, len)?;
                        let t = if all_heads {
                            t
                        } else {
                            t.narrow(2, heads.start, heads.len())?
                        };
                        t.contiguous()
                    };
                    match &piece.rows {
                        Rows::Hot { k, v } | Rows::ColdExact { k, v } => {
                            out_k.slice_set(&select(k)?, 1, offset)?;
                            out_v.slice_set(&select(v)?, 1, offset)?;
                        }
                        Rows::Quantized { k, v } => {
                            for (codes, out) in [(k, &out_k), (v, &out_v)] {
                                let mut codes = codes.narrow(1, at, len)?;
                                if !all_heads {
                                    codes = codes.narrow(2, heads.start, heads.len())?;
                                }
                                match self.path {
                                    Path::InPlace => quant::dequantize_into(
                                        &codes,
                                        &out.narrow(1, offset, len)?,
                                    )?,
                                    Path::Generic => out.slice_set(
                                        &quant::generic::dequantize(&codes, self.dtype)?,
                                        1,
                                        offset,
                                    )?,
                                }
                            }
                        }
                    }
                    offset += len;
                }
            }
        }
        debug_assert_eq!(offset, positions.len(), "every visible position is stored");
        Ok((positions, out_k, out_v))
    }

    /// Drops the stored rows of `gone` from every chunk (trimming pieces).
    pub(super) fn drop_rows(chunks: &mut [Chunk], gone: Range<u64>) -> candle_core::Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        for chunk in chunks
            .iter_mut()
            .filter(|ch| overlap(&ch.range(), &gone) > 0)
        {
            let mut kept = Vec::with_capacity(chunk.pieces.len() + 1);
            for piece in chunk.pieces.drain(..) {
                let span = piece.range();
                if overlap(&span, &gone) == 0 {
                    kept.push(piece);
                    continue;
                }
                for part in [
                    span.start..gone.start.min(span.end),
                    gone.end.max(span.start)..span.end,
                ] {
                    if part.is_empty() {
                        continue;
                    }
                    let len = (part.end - part.start) as usize;
                    let rows = piece
                        .rows
                        .trimmed((part.start - span.start) as usize, len)?;
                    kept.push(Piece {
                        start: part.start,
                        len,
                        rows,
                    });
                }
            }
            chunk.pieces = kept;
        }
        Ok(())
    }

    /// Turns the rows of a chunk cold (docs/contract.md §6): quantized once, the
    /// full-precision tensors dropped.
    pub(super) fn freeze(chunk: &mut Chunk, quant: Quant, path: Path) -> candle_core::Result<()> {
        let quantize = match path {
            Path::InPlace => quant::quantize,
            Path::Generic => quant::generic::quantize,
        };
        for piece in &mut chunk.pieces {
            if let Rows::Hot { k, v } = &piece.rows {
                piece.rows = match quant {
                    Quant::None => Rows::ColdExact {
                        k: k.clone(),
                        v: v.clone(),
                    },
                    q => Rows::Quantized {
                        k: quantize(k, q)?,
                        v: quantize(v, q)?,
                    },
                };
            }
        }
        chunk.cold = true;
        Ok(())
    }

    /// The hot rows of a new chunk: the payload, or zeros with the written
    /// heads set for a head range.
    pub(super) fn hot_rows(
        &self,
        n: usize,
        heads: &Range<usize>,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<Rows> {
        let c = &self.config;
        let fill = |payload: &Tensor| -> candle_core::Result<Tensor> {
            if heads.len() == c.heads {
                payload.force_contiguous()
            } else {
                let t = Tensor::zeros((c.batch, n, c.heads, c.head_dim), self.dtype, &self.device)?;
                t.slice_set(&payload.contiguous()?, 2, heads.start)?;
                Ok(t)
            }
        };
        Ok(Rows::Hot {
            k: fill(k)?,
            v: fill(v)?,
        })
    }
}

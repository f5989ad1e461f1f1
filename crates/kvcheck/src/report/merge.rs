//! Merging the reports of a campaign's shards: each kind's counts added,
//! shard lists checked for overlaps.

use super::findings::merge_findings;
use super::shard::Shard;

#[allow(unused_imports)]
use super::*;

pub(super) fn check_shards(have: &[Shard], new: &[Shard]) -> Result<(), ReportError> {
    for s in new {
        if let Some(h) = have.iter().find(|h| h.count != s.count) {
            return Err(ReportError::Mismatch(format!(
                "shard {s} and shard {h} split the campaign differently"
            )));
        }
        if have.contains(s) {
            return Err(ReportError::Mismatch(format!("shard {s} appears twice")));
        }
    }
    Ok(())
}

pub(super) fn merge_run(a: &mut RunReport, b: RunReport) -> Result<(), ReportError> {
    if (a.seed, a.max_ops, &a.subject) != (b.seed, b.max_ops, &b.subject) {
        return Err(ReportError::Mismatch(format!(
            "run reports of different campaigns (seed {} vs {}, max ops {} vs {}, subject {} vs {})",
            a.seed, b.seed, a.max_ops, b.max_ops, a.subject, b.subject
        )));
    }
    check_shards(&a.shards, &b.shards)?;
    a.shards.extend(b.shards);
    a.elapsed_s = a.elapsed_s.max(b.elapsed_s);
    a.divergences.extend(b.divergences);
    a.divergence = a.divergence.take().or(b.divergence);
    a.min_judged = a.min_judged.max(b.min_judged);
    merge_findings(&mut a.findings, b.findings);
    for p in b.profiles {
        match a.profiles.iter_mut().find(|q| q.name == p.name) {
            Some(q) => {
                q.cases += p.cases;
                q.ops += p.ops;
                q.busy_s += p.busy_s;
                q.divergences += p.divergences;
                q.coverage.merge(&p.coverage);
                merge_judged(&mut q.judged, &p.judged);
                q.domain.add(&p.domain);
            }
            None => a.profiles.push(p),
        }
    }
    // A warning is about the whole campaign's draws, not one shard's.
    a.warnings = a.domain().warning().into_iter().collect();
    Ok(())
}

pub(super) fn merge_explore(a: &mut ExploreSummary, b: ExploreSummary) -> Result<(), ReportError> {
    if (a.depth, &a.subject) != (b.depth, &b.subject) {
        return Err(ReportError::Mismatch(format!(
            "explore reports of different campaigns (depth {} vs {}, subject {} vs {})",
            a.depth, b.depth, a.subject, b.subject
        )));
    }
    check_shards(&a.shards, &b.shards)?;
    a.shards.extend(b.shards);
    a.elapsed_s = a.elapsed_s.max(b.elapsed_s);
    a.configs.extend(b.configs);
    merge_findings(&mut a.findings, b.findings);
    for e in b.required {
        if !a.required.contains(&e) {
            a.required.push(e);
        }
    }
    // The discovery of the earliest config in grid order, as one
    // unsharded grid would report it.
    a.discovery = match (a.discovery.take(), b.discovery) {
        (Some(x), Some(y)) => Some(if y.index < x.index { y } else { x }),
        (x, y) => x.or(y),
    };
    Ok(())
}

pub(super) fn merge_power(a: &mut PowerReport, b: PowerReport) -> Result<(), ReportError> {
    if (a.seed, a.time_s, &a.cache, &a.engines) != (b.seed, b.time_s, &b.cache, &b.engines) {
        return Err(ReportError::Mismatch(format!(
            "power reports of different campaigns (seed {} vs {}, time {} s vs {} s, cache {} vs {}, engines {} vs {})",
            a.seed,
            b.seed,
            a.time_s,
            b.time_s,
            a.cache,
            b.cache,
            a.engines.join(","),
            b.engines.join(",")
        )));
    }
    if a.table != b.table {
        return Err(ReportError::Mismatch(format!(
            "power reports of different tables ({} vs {})",
            a.table.join(","),
            b.table.join(",")
        )));
    }
    check_shards(&a.shards, &b.shards)?;
    if let Some(row) = b
        .rows
        .iter()
        .find(|r| a.rows.iter().any(|q| q.index == r.index))
    {
        return Err(ReportError::Mismatch(format!(
            "row {} ({}) appears in two reports",
            row.index, row.fault
        )));
    }
    a.shards.extend(b.shards);
    a.elapsed_s = a.elapsed_s.max(b.elapsed_s);
    a.rows.extend(b.rows);
    Ok(())
}

impl Report {
    /// Combines the reports of the shards of one campaign: same command,
    /// same seed (run), depth (explore) or seed, budget, cache and engines
    /// (power), same shard count, no shard twice. The result has the totals one unsharded run prints when
    /// every shard is present.
    pub fn merge(reports: Vec<Report>) -> Result<Report, ReportError> {
        let mut reports = reports.into_iter();
        let mut merged = reports.next().ok_or(ReportError::Empty)?;
        for next in reports {
            match (&mut merged, next) {
                (Report::Run(a), Report::Run(b)) => merge_run(a, b)?,
                (Report::Explore(a), Report::Explore(b)) => merge_explore(a, b)?,
                (Report::Power(a), Report::Power(b)) => merge_power(a, b)?,
                (a, b) => {
                    return Err(ReportError::Mismatch(format!(
                        "a {} report and a {} report",
                        a.command(),
                        b.command()
                    )))
                }
            }
        }
        match &mut merged {
            Report::Run(r) => r.shards.sort_by_key(|s| s.index),
            Report::Explore(r) => {
                r.shards.sort_by_key(|s| s.index);
                r.configs.sort_by_key(|c| c.index);
            }
            Report::Power(r) => {
                r.shards.sort_by_key(|s| s.index);
                r.rows.sort_by_key(|row| row.index);
            }
        }
        Ok(merged)
    }
}

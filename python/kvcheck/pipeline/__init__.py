"""`kvcheck.pipeline`, the pipeline kit: what the adapters of
Self-Forcing-shaped video pipelines (Self-Forcing, fastvideo, LongLive,
Rolling Forcing, LightX2V) share, beside `kvcheck.adapter`, so that
`adapters/<library>/` holds only what is the library's own.

- `source`: finding a library's inline cache statements in its files and
  compiling them unmodified;
- `serving`: serving them as a kvcheck-subject/1 process (the background
  load, the commit, the chunk loop's requests and declared domain, the
  command line);
- `tapped`: a library's tiny causal Wan model read by the attention tap;
- `shape`: the Self-Forcing cache shape run on stand-ins;
- `traces`: the plumbing of each adapter's pipeline_protocol.py;
- `testing`: the opt-in tests' setup.

docs/architecture.md ("A pipeline adapter") says what goes where. The
modules import the standard library alone until a subject opens (then
torch); `traces` and `testing` load adapters/'s shared scripts (the
reference model, kvtrace_replay) by path, with `kvcheck.adapter.shared`.
"""

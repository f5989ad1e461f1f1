#!/usr/bin/env python3
"""Random kvtrace/1 traces of what LongLive 2.0's inference loop asks of its cache.

    PYTHONPATH=python python3 adapters/longlive/pipeline_protocol.py --count 200 --seed 1 --out DIR [--aligned] [--recache]

`CausalDiffusionInferencePipeline._inference_inner` with `sink_size` S in
1..3 and `multi_shot_sink` (so `global_sink_size` = S), `num_frame_per_block`
n in 1..4, `local_attn_size` C (the capacity: the window is the whole
cache), optionally `independent_first_frame` (a first chunk of 1 frame):
every chunk is appended at the global end and rewritten for the rest of its
1..4 denoising steps and once more by the clean re-run at timestep 0; now
and then a chunk after the first is a scene cut, which pins it
(`_pin_current_chunk`: `pin n`) and, with `--recache`
(`shot_clean_recache`), first drops every frame between the global sink and
the chunk (`_zero_kv_data` and the clean re-run: `evict k` with `k` those
frames); now and then a reset (the next video).

`--aligned` draws only configurations where every pin comes to rest right
after the global sink, as in the release configs (`local_attn_size` 32,
`sink_size` 8, chunks of 8): `C - S` a multiple of n, at least 2n (a chunk
fits beside the global sink and a merged pin), n >= S, no independent first
frame. Without it, C is S + n + 0..8, anything.

Traces carry no `expect`: `kvcheck replay DIR --subject ...` runs the model
beside the subject.
"""

import sys

from kvcheck.pipeline import traces


def trace(rng, aligned, recache):
    sink = rng.randint(1, 3)
    if aligned:
        n = rng.randint(sink, 4)
        capacity = sink + n * rng.randint(2, 4)  # room for the global sink, a merged pin and a chunk
        first = False
    else:
        n = rng.randint(1, 4)
        capacity = sink + n + rng.randint(0, 8)
        first = rng.random() < 0.3
    steps = rng.randint(1, 4)
    ops = []
    for video in range(rng.choice([1, 1, 1, 2])):
        if video:
            ops.append("reset")
        g, resident = 0, []  # resident: the contract's positions, to size the re-cache's evict
        chunks = ([1] if first else []) + [n] * rng.randint(1, 10)
        pinned = False
        for index, size in enumerate(chunks):
            for _ in range(steps):
                ops.append({"write": {"start": g, "len": size}})
            # what the contract holds once the chunk is in (no pin is set
            # before a re-cache: only a video's first scene cut re-caches)
            resident = resident + list(range(g, g + size))
            if len(resident) > capacity:
                resident = resident[:sink] + resident[sink:][-(capacity - sink):]
            cut = index > 0 and rng.random() < 0.25
            if cut and recache and not pinned:
                # _zero_kv_data keeps the global sink [0, S) and the chunk: the
                # evict names the frames between them.
                ops.append({"evict": {"tokens": len([p for p in resident if sink <= p < g])}})
                resident = [p for p in resident if p < sink or p >= g]
            ops.append({"write": {"start": g, "len": size}})  # the clean re-run
            if cut:
                ops.append({"pin": {"tokens": size}})
                pinned = True
            g += size
    note = "LongLive: local_attn_size %d, sink_size %d (multi_shot_sink), num_frame_per_block %d%s, %d denoising steps%s" % (
        capacity, sink, n, ", independent_first_frame" if first else "", steps, ", shot_clean_recache" if recache else "")
    config = traces.random_config(rng, capacity, sink, global_sink=sink)
    return config, ops, note


def main(argv=None):
    return traces.main(argv, __doc__, trace, "longlive", label="LongLive", options=[
        ("--aligned", {"action": "store_true", "help": "only configurations whose pins come to rest after the global sink"}),
        ("--recache", {"action": "store_true", "help": "shot_clean_recache: re-cache every scene cut"}),
    ])


if __name__ == "__main__":
    sys.exit(main())

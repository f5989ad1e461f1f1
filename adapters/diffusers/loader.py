"""Takes the inline KV-cache code of two diffusers pipelines out of the installed package.

**SANA-WM stage-2 refiner.** The refiner's KV cache is three pieces of
diffusers:

- `SanaWMRefinerKVCache` / `SanaWMRefinerKVLayerCache`
  (`models/transformers/transformer_sana_wm_refiner.py`): per-layer storage
  of the pre-RoPE sink K/V, the post-RoPE recent history and the K/V the last
  forward captured, plus the shared sink RoPE `sink_pe`;
- `SanaWMLTX2RefinerAttnProcessor` (same file): the self-attention that
  prepends `[sink (re-RoPE'd at sink_pe) + history]` to the active block's
  K/V and captures K/V in the `capture_*` modes; the transformer forward
  passes each block its layer cache;
- the bookkeeping between forwards, which is inline in
  `SanaWMLTX2Refiner.__call__` (`pipelines/sana_wm/refiner.py`): capture the
  sink, rebuild `sink_pe` per block, capture the refined block, append it to
  the history, trim the history to `kv_max_frames - sink_size` frames.

**AnyFlow-FAR.** `AnyFlowCausalAttnProcessor`
(`models/transformers/transformer_anyflow_far.py`) writes a per-layer dict
of `full_cache` / `compressed_cache` buffers in the cache-prefill forward
(`_forward_cache`) and reads their first `num_cached_*` rows before the
current chunk in the autoregressive forward (`_forward_inference`); the
buffers are allocated, the denoising forward is called and the cache is
re-encoded after each chunk (`encode_kv_cache`) inline in
`AnyFlowFARPipeline.__call__` (`pipelines/anyflow/pipeline_anyflow_far.py`).

The model files are imported as they are. The pipeline files import
transformers (Gemma-3, UMT5) at module level and their `__call__` runs a
whole video at once (text encoder, every chunk, every denoising step), so
this module does not import them: it parses the installed file and
compiles, unmodified, the statements of `__call__` that touch the cache,
each as a small program that runs in a namespace holding the loop's
variables (`kv_cache`, `history_frames`, `block_start`, `chunk_idx`, ...),
plus the helpers they call (`_pack_latents`,
`SanaWMLTX2Refiner._capture_block_kv`, `AnyFlowFARPipeline.encode_kv_cache`).
The adapter runs those programs in the order `__call__` runs them. Nothing
of them is rewritten; a release whose `__call__` lacks one of them is
refused with the statement it could not find.
"""

import ast
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VERSION = "0.42.1"
REFINER = os.path.join("pipelines", "sana_wm", "refiner.py")
ANYFLOW = os.path.join("pipelines", "anyflow", "pipeline_anyflow_far.py")


def package_dir():
    """The installed `diffusers` package directory, without importing it."""
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("diffusers is not installed: run adapters/diffusers/setup.sh")
    return list(spec.submodule_search_locations)[0]


def installed_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diffusers")
    except PackageNotFoundError:
        return None


def is_ready(venv=None):
    """Whether setup.sh has completed for the venv (its marker file exists)."""
    venv = venv or os.environ.get("VENV") or os.path.join(HERE, ".venv")
    return os.path.isfile(os.path.join(venv, "KVCHECK_DIFFUSERS_READY"))


# Each program: name -> the statements it runs, each as (where it is in
# __call__, a test on the unparsed statement). `call` is the body of
# __call__, `block` the body of its `for block_idx` loop, `step` the body of
# the denoising loop inside that. A statement may sit inside an `if` (a
# patched release): the whole `if` is then taken, once.
REFINER_PROGRAMS = {
    # open: the loop's variables and a fresh cache
    "setup": [
        ("call", lambda s: s.startswith("num_layers = ")),
        ("call", lambda s: s.startswith("tokens_per_frame = ")),
        ("call", lambda s: s.startswith("history_frames = 0")),
        ("call", lambda s: s.startswith("kv_cache = SanaWMRefinerKVCache(")),
    ],
    # the first chunk: capture the sink pre-RoPE and store it in every layer
    "sink": [
        ("call", lambda s: "self._capture_block_kv(" in s and "'capture_pre_rope'" in s),
        ("call", lambda s: "store_sink(" in s),
    ],
    # the start of a block: its frame positions and the shifted sink RoPE
    "block": [
        ("block", lambda s: s.startswith("frame_positions = list(range(block_start, block_end))")),
        ("block", lambda s: s.startswith("sink_rope_offset = ")),
        ("block", lambda s: "kv_cache.sink_pe = " in s),
    ],
    # one denoising step of the block: the transformer in `inject` mode
    "denoise": [
        ("step", lambda s: s.startswith("sigma = ")),
        ("step", lambda s: s.startswith("latent_tokens = _pack_latents(")),
        ("step", lambda s: s.startswith("seq_len = ")),
        ("step", lambda s: s.startswith("timestep = torch.full(")),
        ("step", lambda s: s.startswith("video_rotary_emb = ")),
        ("step", lambda s: s.startswith("velocity_pred = self.transformer(") and "'inject'" in s),
    ],
    # the end of a block: capture it post-RoPE and append it to the history
    "commit": [
        ("block", lambda s: "self._capture_block_kv(" in s and "'inject_and_capture_post_rope'" in s),
        ("block", lambda s: s.startswith("for layer_idx in range(num_layers):") and "store_history(" in s),
        ("block", lambda s: s.startswith("history_frames += block_end - block_start")),
    ],
    # the window: kv_max_frames -> max_history_frames, then the trim
    "window": [
        ("call", lambda s: s.startswith("max_history_frames = ")),
    ],
    "trim": [
        ("block", lambda s: s.startswith("if ") and "max_history_frames" in s and "store_history(" in s),
    ],
}


# AnyFlow-FAR: `call` is the body of __call__, `chunk` the body of its
# `for chunk_idx` loop, `denoise` the body of the `if chunk_idx >=
# num_context_chunks` branch, `step` the body of its denoising loop.
ANYFLOW_PROGRAMS = {
    # open and reset (a new video): tokens per frame, the buffers, the flags
    "setup": [
        ("call", lambda s: s.startswith("full_token_per_frame = ")),
        ("call", lambda s: s.startswith("compressed_token_per_frame = ")),
        ("call", lambda s: s.startswith("if use_kv_cache:") and "kv_cache_flag = " in s),
    ],
    # one denoising step of the chunk: the autoregressive forward
    "denoise": [
        ("denoise", lambda s: s.startswith("this_chunk_partition = ")),
        ("step", lambda s: s.startswith("latent_model_input = ")),
        ("step", lambda s: s.startswith("timestep = t.expand(")),
        ("step", lambda s: s.startswith("timestep = timestep.repeat(")),
        ("step", lambda s: s.startswith("if use_mean_velocity:")),
        ("step", lambda s: "self.transformer(" in s and "kv_cache=kv_cache" in s),
    ],
    # the end of a chunk: the cache re-encoded from every finished chunk
    "commit": [
        ("chunk", lambda s: "self.encode_kv_cache(" in s),
    ],
}


class Programs:
    """The cache code of one pipeline of the installed diffusers."""

    def __init__(self, version, path, programs, functions, sources):
        self.version = version
        self.path = path
        self.programs = programs  # name -> code object
        self.functions = functions  # name -> function compiled from the file
        self.sources = sources  # name -> the statements' source, for reports

    def run(self, name, namespace):
        exec(self.programs[name], namespace)


def _function(tree, cls_name, name):
    for node in tree.body:
        if cls_name is None and isinstance(node, ast.FunctionDef) and node.name == name:
            return node
        if cls_name is not None and isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _loop(body, target):
    """The `for TARGET in ...` statement found in `body` (also inside `with`)."""
    for node in body:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == target:
            return node
        if isinstance(node, ast.With):
            found = _loop(node.body, target)
            if found is not None:
                return found
    return None


def _loop_over_enumerate(body):
    """The denoising loop `for i, t in enumerate(...timesteps...)` in `body`."""
    for node in body:
        if isinstance(node, ast.For) and ast.unparse(node.iter).startswith("enumerate(") and "timesteps" in ast.unparse(node.iter):
            return node
    return None


def _branch(body, test):
    """The body of the `if` in `body` whose test unparses to `test`."""
    for node in body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == test:
            return node.body
    return None


def _read(relative):
    path = os.path.join(package_dir(), relative)
    if not os.path.isfile(path):
        raise RuntimeError("diffusers %s ships no %s" % (installed_version(), relative))
    with open(path) as f:
        text = f.read()
    return path, text, ast.parse(text, filename=path)


def _compile(path, text, bodies, spec, functions):
    import __future__

    flags = __future__.annotations.compiler_flag
    programs, sources = {}, {}
    for name, wanted in spec.items():
        nodes = []
        for where, test in wanted:
            found = [node for node in bodies[where] if test(ast.unparse(node))]
            if len(found) != 1:
                raise RuntimeError(
                    "%s: expected one statement for the %r program in %s, found %d" % (path, name, where, len(found))
                )
            if not any(node is found[0] for node in nodes):
                nodes.append(found[0])
        module = ast.Module(body=nodes, type_ignores=[])
        programs[name] = compile(module, path, "exec", flags=flags, dont_inherit=True)
        sources[name] = [ast.get_source_segment(text, node) for node in nodes]

    import copy

    import torch

    namespace = {"torch": torch, "copy": copy}
    module = ast.Module(body=list(functions), type_ignores=[])
    exec(compile(module, path, "exec", flags=flags, dont_inherit=True), namespace)
    compiled = {node.name: namespace[node.name] for node in functions}
    return Programs(installed_version(), path, programs, compiled, sources)


def load_refiner():
    """The SANA-WM refiner's `Programs` (functions `_pack_latents`,
    `_capture_block_kv`); RuntimeError naming what a release lacks."""
    path, text, tree = _read(REFINER)
    call = _function(tree, "SanaWMLTX2Refiner", "__call__")
    capture = _function(tree, "SanaWMLTX2Refiner", "_capture_block_kv")
    pack = _function(tree, None, "_pack_latents")
    if call is None or capture is None or pack is None:
        raise RuntimeError("%s has no SanaWMLTX2Refiner.__call__ / _capture_block_kv / _pack_latents" % path)
    block_loop = _loop(call.body, "block_idx")
    if block_loop is None:
        raise RuntimeError("%s: SanaWMLTX2Refiner.__call__ has no `for block_idx` loop" % path)
    step_loop = _loop_over_enumerate(block_loop.body)
    if step_loop is None:
        raise RuntimeError("%s: the block loop has no `for i, t in enumerate(timesteps)` loop" % path)
    bodies = {"call": call.body, "block": block_loop.body, "step": step_loop.body}
    return _compile(path, text, bodies, REFINER_PROGRAMS, [pack, capture])


def load_anyflow():
    """AnyFlow-FAR's `Programs` (function `encode_kv_cache`); RuntimeError
    naming what a release lacks."""
    path, text, tree = _read(ANYFLOW)
    call = _function(tree, "AnyFlowFARPipeline", "__call__")
    encode = _function(tree, "AnyFlowFARPipeline", "encode_kv_cache")
    if call is None or encode is None:
        raise RuntimeError("%s has no AnyFlowFARPipeline.__call__ / encode_kv_cache" % path)
    chunk_loop = _loop(call.body, "chunk_idx")
    if chunk_loop is None:
        raise RuntimeError("%s: AnyFlowFARPipeline.__call__ has no `for chunk_idx` loop" % path)
    denoise = _branch(chunk_loop.body, "chunk_idx >= num_context_chunks")
    step_loop = _loop_over_enumerate(denoise or [])
    if step_loop is None:
        raise RuntimeError("%s: the chunk loop has no denoising loop under `if chunk_idx >= num_context_chunks`" % path)
    bodies = {"call": call.body, "chunk": chunk_loop.body, "denoise": denoise, "step": step_loop.body}
    return _compile(path, text, bodies, ANYFLOW_PROGRAMS, [encode])

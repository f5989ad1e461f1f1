"""Takes vllm-omni's LingBot-World attention cache out of the extracted sources.

The full `vllm_omni` package needs vllm and a GPU stack, and
`vllm_omni/diffusion/models/lingbot_world/transformer.py` imports both at
module level (tensor-parallel linears, distributed groups, the paged
attention kernels). The cache itself is two definitions of that file that
use only torch: the `LingBotAttentionCache` dataclass (K/V storage and its
cursors) and `LingBotSelfAttention._update_cache` (the method the direct,
non-paged attention path calls for every chunk: it rolls the buffer, keeps
the sink, and returns the K/V the chunk attends to). This module parses the
file setup.sh extracted, compiles exactly those two definitions, unmodified,
in a namespace holding torch and the standard-library names they use, and
returns them. Nothing else of vllm-omni runs.
"""

import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VERSION = "0.30.0"
TRANSFORMER = os.path.join("vllm_omni", "diffusion", "models", "lingbot_world", "transformer.py")


def version_dir(version):
    """Where setup.sh extracts `version`."""
    return os.path.join(HERE, ".vllm-omni", version)


def is_ready(version):
    """Whether setup.sh has completed for `version` (its marker file exists)."""
    return os.path.isfile(os.path.join(version_dir(version), "READY"))


class LingBot:
    """The LingBot-World cache definitions of one release."""

    def __init__(self, cache_class, update_cache, source):
        self.AttentionCache = cache_class
        self.update_cache = update_cache
        self.source = source


def load(version=DEFAULT_VERSION):
    """`LingBot` for `version`; RuntimeError naming the setup command if the
    sources are absent, or naming the definition a release lacks."""
    if not is_ready(version):
        raise RuntimeError(
            "vllm-omni %s is not set up: run VLLM_OMNI_VERSION=%s adapters/vllm-omni/setup.sh" % (version, version)
        )
    path = os.path.join(version_dir(version), TRANSFORMER)
    with open(path) as f:
        text = f.read()
    tree = ast.parse(text, filename=path)
    cache_def = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LingBotAttentionCache"), None)
    attention = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LingBotSelfAttention"), None)
    method = None
    if attention is not None:
        method = next((n for n in attention.body if isinstance(n, ast.FunctionDef) and n.name == "_update_cache"), None)
    if cache_def is None or method is None:
        raise RuntimeError("%s has no LingBotAttentionCache / LingBotSelfAttention._update_cache" % path)
    import __future__
    import dataclasses
    import sys
    import types

    import torch

    # `from __future__ import annotations` in the file keeps every annotation
    # a string, so the definitions need only what their bodies call. The
    # module is registered because @dataclass looks its module up.
    name = "vllm_omni_lingbot_cache_" + version.replace(".", "_")
    module = types.ModuleType(name)
    module.__file__ = path
    module.torch = torch
    module.dataclass = dataclasses.dataclass
    sys.modules[name] = module
    code = compile(
        ast.Module(body=[cache_def, method], type_ignores=[]),
        path,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    exec(code, module.__dict__)
    return LingBot(module.LingBotAttentionCache, module._update_cache, path)

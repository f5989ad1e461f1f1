"""Imports sglang's streaming KV cache classes from the extracted sources alone.

The full `sglang` package does not import without its GPU stack, so
setup.sh extracts only `sglang/multimodal_gen/runtime/layers/kvcache/*.py`
(and the QVG settings dataclass `configs/quantization/qvg_kv.py`) into
`adapters/sglang/.sglang/<version>/`. This module makes those files
importable under their real module names without running any other part of
sglang:

- the parent packages (`sglang`, `sglang.multimodal_gen`, ...) are empty
  namespace modules whose `__path__` points at the extracted tree, so no
  package `__init__.py` of sglang runs;
- `sglang.multimodal_gen.runtime.utils.logging_utils` is replaced by a
  stand-in whose `init_logger(name)` returns a standard `logging.Logger`
  with an `info_once` method (the only logging the cache files use);
- the Quant-VideoGen kernels (`quant_videogen.functions`, Triton, CUDA) are
  not installed: `qvg_packed_cache._qvg_functions()` raises ImportError if a
  cache ever packs a segment, which happens only with quantization on.

Everything the caches compute runs unmodified from sglang's own files.
"""

import logging
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VERSION = "0.5.23"

_PACKAGES = [
    "sglang",
    "sglang.multimodal_gen",
    "sglang.multimodal_gen.configs",
    "sglang.multimodal_gen.configs.quantization",
    "sglang.multimodal_gen.runtime",
    "sglang.multimodal_gen.runtime.layers",
    "sglang.multimodal_gen.runtime.utils",
]


def version_dir(version):
    """Where setup.sh extracts `version`."""
    return os.path.join(HERE, ".sglang", version)


def is_ready(version):
    """Whether setup.sh has completed for `version` (its marker file exists)."""
    return os.path.isfile(os.path.join(version_dir(version), "READY"))


def _logging_utils():
    module = types.ModuleType("sglang.multimodal_gen.runtime.utils.logging_utils")
    seen = set()

    def init_logger(name):
        logger = logging.getLogger(name)

        def info_once(msg, *args):
            if msg not in seen:
                seen.add(msg)
                logger.info(msg, *args)

        logger.info_once = info_once
        return logger

    module.init_logger = init_logger
    return module


def load(version=DEFAULT_VERSION):
    """The extracted kvcache modules of `version`: (causal module, qvg module or None).

    Raises RuntimeError naming the setup command if the sources are absent.
    """
    root = version_dir(version)
    if not is_ready(version):
        raise RuntimeError(
            "sglang %s is not set up: run SGLANG_VERSION=%s adapters/sglang/setup.sh" % (version, version)
        )
    if "sglang" in sys.modules and getattr(sys.modules["sglang"], "__kvcheck_root__", None) != root:
        raise RuntimeError("another sglang is already imported in this process")
    for name in _PACKAGES + ["sglang.multimodal_gen.runtime.layers.kvcache"]:
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, *name.split("."))]
        module.__kvcheck_root__ = root
        sys.modules[name] = module
    sys.modules.setdefault("sglang.multimodal_gen.runtime.utils.logging_utils", _logging_utils())
    import importlib

    causal = importlib.import_module("sglang.multimodal_gen.runtime.layers.kvcache.causal_attention_cache")
    qvg_path = os.path.join(root, "sglang", "multimodal_gen", "runtime", "layers", "kvcache", "qvg_packed_cache.py")
    qvg = None
    if os.path.isfile(qvg_path):
        qvg = importlib.import_module("sglang.multimodal_gen.runtime.layers.kvcache.qvg_packed_cache")
    return causal, qvg

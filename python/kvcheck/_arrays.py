"""Payload bytes <-> arrays: the dtype and layout conversions of the protocol.

Payloads travel as the little-endian, row-major bytes of a `[B, n, heads, D]`
tensor in the config dtype. A subject receives them as numpy arrays, torch
tensors or raw bytes (its `arrays` attribute) and may return any of the
three. numpy has no bfloat16: a bf16 payload reaches a numpy subject as a
uint16 array of the bit patterns, and a float array it returns for a bf16
config is rounded to bf16 (nearest even), as torch rounds.
"""

import sys

DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2}
NUMPY_DTYPES = {"f32": "<f4", "f16": "<f2", "bf16": "<u2"}
LAYOUTS = ("bnhd", "bhnd")
ARRAYS = ("numpy", "torch", "bytes")


def import_numpy():
    import numpy

    return numpy


def import_torch():
    import torch

    return torch


def torch_dtype(torch, dtype):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]


def decode(data, shape, dtype, arrays, layout):
    """`data` (bytes of a [B, n, h, D] tensor) as the subject's kind of array.

    The array is a fresh, writable copy in `layout` order. `shape` is None
    when a dimension is negative (no tensor has such a shape): then the bytes
    are handed over as they are to a `bytes` subject and as None otherwise.
    """
    if data is None:
        return None
    if arrays == "bytes":
        return bytes(data)
    if shape is None:
        return None
    if arrays == "numpy":
        np = import_numpy()
        out = np.frombuffer(data, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
        if layout == "bhnd":
            out = out.transpose(0, 2, 1, 3)
        return np.array(out, order="C")  # a writable copy, contiguous in `layout` order
    torch = import_torch()
    tdtype = torch_dtype(torch, dtype)
    if len(data) == 0:
        out = torch.zeros(shape, dtype=tdtype)
    else:
        out = torch.frombuffer(bytearray(data), dtype=tdtype).reshape(shape)
    if layout == "bhnd":
        out = out.transpose(1, 2).contiguous()
    return out


def encode(value, dtype, layout):
    """The little-endian bytes of `value` (numpy array, torch tensor or
    bytes-like) in the config dtype, `[B, n, h, D]` order."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach()
        if layout == "bhnd" and tensor.dim() == 4:
            tensor = tensor.transpose(1, 2)
        tensor = tensor.to(device="cpu", dtype=torch_dtype(torch, dtype)).contiguous()
        return tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return numpy_bytes(numpy, value, dtype, layout)
    raise TypeError(
        "K/V of type %s: return a numpy array, a torch tensor or bytes" % type(value).__name__
    )


def numpy_bytes(np, array, dtype, layout):
    if layout == "bhnd" and array.ndim == 4:
        array = array.transpose(0, 2, 1, 3)
    if dtype != "bf16":
        return np.ascontiguousarray(array, dtype=NUMPY_DTYPES[dtype]).tobytes()
    if array.dtype in (np.uint16, np.int16):
        return np.ascontiguousarray(array).astype("<u2").tobytes()
    return bf16_bits(np, array).tobytes()


def bf16_bits(np, array):
    """bf16 bit patterns (uint16, little-endian) of a float array, rounded to
    nearest even from f32, NaNs kept quiet (as torch and the `half` crate do)."""
    bits = np.ascontiguousarray(array, dtype="<f4").view("<u4").astype(np.uint64)
    nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = np.where(nan, (bits >> 16) | 0x0040, rounded) & 0xFFFF
    return out.astype("<u2")

"""kvcheck for Python: check a streaming KV cache against the cache contract.

- `kvcheck.Subject`: the base class a cache implements (see
  `kvcheck.subject` for the API); `python -m kvcheck.serve module:Class`
  serves it to the `kvcheck` binary over kvcheck-subject/1.
- `kvcheck.Refused(kind, message)`: a refusal of the contract.
- `kvcheck.check(MyCache, ...)`: runs the `kvcheck` binary against the class
  (used by the pytest plugin).
"""

from .subject import (
    DTYPES,
    ERROR_KINDS,
    FEATURES,
    PROTOCOL,
    VARIANTS,
    AdapterError,
    Refused,
    Subject,
    serve,
)

__all__ = [
    "AdapterError",
    "DTYPES",
    "ERROR_KINDS",
    "FEATURES",
    "PROTOCOL",
    "Refused",
    "Subject",
    "VARIANTS",
    "serve",
]

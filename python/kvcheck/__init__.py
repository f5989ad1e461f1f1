"""kvcheck for Python: check a streaming KV cache against the cache contract.

- `kvcheck.Subject`: the base class a cache implements (see
  `kvcheck.subject` for the API); `python -m kvcheck.serve module:Class`
  serves it to the `kvcheck` binary over kvcheck-subject/1.
- `kvcheck.Refused(kind, message)`: a refusal of the contract.
- `kvcheck.Outside(reason)`: a request the cache is never asked in real
  use (the subject's `domain` declares which it is asked).
- `kvcheck.check(MyCache, ...)`: runs the `kvcheck` binary against the class
  (used by the pytest plugin).
- `kvcheck.prefix`: the prefix family (docs/contract.md Part II):
  `PrefixSubject`, the base class of a prefix cache, served by
  `python -m kvcheck.serve_prefix module:Class`; `payload_bits`, the rows
  it writes (§16).
"""

from . import prefix
from .runner import Divergence, MostlyOutside, Result, TooFewJudged, binary, check
from .subject import (
    DOMAIN_FIELDS,
    DTYPES,
    ERROR_KINDS,
    FEATURES,
    PROTOCOL,
    TRIMS,
    VARIANTS,
    AdapterError,
    Outside,
    Refused,
    Subject,
    serve,
)

__all__ = [
    "AdapterError",
    "Divergence",
    "Result",
    "binary",
    "check",
    "DOMAIN_FIELDS",
    "DTYPES",
    "ERROR_KINDS",
    "FEATURES",
    "MostlyOutside",
    "Outside",
    "PROTOCOL",
    "prefix",
    "Refused",
    "Subject",
    "TooFewJudged",
    "TRIMS",
    "VARIANTS",
    "serve",
]

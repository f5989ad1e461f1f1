import kvcheck
from sink_cache import SinkCache


def test_sink_cache_keeps_the_contract():
    kvcheck.check(SinkCache, time=10)

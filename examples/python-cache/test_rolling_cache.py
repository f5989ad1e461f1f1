import kvcheck
from rolling_cache import RollingCache


def test_rolling_cache_keeps_the_contract():
    kvcheck.check(RollingCache, time=10)

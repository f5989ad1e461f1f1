"""Checks the tapped toy pipeline with kvcheck:

    python check_toy.py [--time S] [--seed N] [--masked] [--bug NAME]

Prints kvcheck's summary, or the minimized divergence with its saved trace
and the command that replays it (exit status 1).
"""

from __future__ import annotations

import argparse
import sys

import kvcheck

from tapped_toy import TappedToy


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=int, default=10)
    parser.add_argument("--seed", type=int)
    args, subject_args = parser.parse_known_args(argv)
    try:
        kvcheck.check(TappedToy, time=args.time, seed=args.seed, args=subject_args)
    except kvcheck.Divergence as divergence:
        print(divergence)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

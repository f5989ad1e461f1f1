"""The minimized trace of docs/findings/sglang-torch-native-swa-reads-full-slots.md,
replayed on the SWA subject with `--read-through` (every row read through
sglang's TorchNativeAttnBackend, repro/torch_native_read.py).

On sglang 0.5.23 the trace reads, for layer 1 (windowed) position 6 of r1,
the payload of its position 0: the backend gathered the SWA buffer at a
full-pool slot. A patched sglang (the finding's diff) reads every row right,
and the Findings case then skips, naming the finding. The plain read (the
translation the other backends make) agrees on the same trace: the cache
hands out the right slots. Without the environment of
adapters/sglang-radix/setup.sh every case skips, saying so:

    adapters/sglang-radix/.venv/bin/python -m unittest discover -s adapters/sglang-radix/tests -v
"""

import base64
import json
import os
import struct
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER))
FINDING = "sglang-torch-native-swa-reads-full-slots"
TRACE = os.path.join(ROOT, "docs", "findings", FINDING + ".kvtrace.json")

# The environment check, and the subject module once it passes, are the
# adapter's other tests' (unittest discover puts this folder on the path).
from test_radix_subject import HAVE_LIBRARY, HELLO, SKIP  # noqa: E402

if HAVE_LIBRARY:
    from kvcheck.prefix import PrefixSession, payload_bits  # noqa: E402
    from test_radix_subject import subject  # noqa: E402


def replay(read_through):
    """The trace's ops on the subject of its run (`--swa 4
    --swa-eviction-interval 1`, `read_through` "extend", "decode" or None),
    then r1's read: (the u32 rows read, the payload expected)."""
    with open(TRACE) as f:
        trace = json.load(f)
    config = trace["config"]
    session = PrefixSession(subject.SglangRadixSubject(swa=(4,), swa_eviction_interval=1,
                                                       read_through=read_through))
    session.handle(HELLO)
    opened = session.handle({"open": {"config": config}})
    assert "ok" in opened, opened
    for index, op in enumerate(trace["ops"]):
        response = session.handle({"op": op, "index": index})
        assert "ok" in response, (op, response)
    read = session.handle({"read": {"request": 1}})
    assert "ok" in read, read
    data = base64.b64decode(read["ok"]["rows"])
    got = list(struct.unpack("<%dI" % (len(data) // 4), data))
    # r1: the prompt [0 1 2 0 1] and two decoded tokens, 7 computed; layer
    # 0 full attention reads [0, 7), layer 1 (W 4) its window [4, 7).
    tokens = [0, 1, 2, 0, 1, 0, 0]
    bits = payload_bits(config["seed"], tokens, config["layers"], config["row_width"])
    want = [x for row in bits[0] for x in row] + [x for row in bits[1][4:] for x in row]
    session.handle({"close": {}})
    return got, want, bits


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class Findings(unittest.TestCase):
    def check(self, read_through):
        got, want, bits = replay(read_through)
        if got == want:
            self.skipTest("this sglang's TorchNativeAttnBackend reads sliding-window layers at their SWA "
                          "slots (docs/findings/%s.md)" % FINDING)
        width = len(bits[0][0])
        # Layer 0 (full attention) is right; of layer 1's rows (positions
        # 4, 5, 6) position 6 holds the payload of position 0.
        self.assertEqual(got[: 7 * width], want[: 7 * width])
        layer1 = [got[7 * width + i * width: 7 * width + (i + 1) * width] for i in range(3)]
        self.assertEqual(layer1[:2], bits[1][4:6])
        self.assertEqual(layer1[2], bits[1][0])
        self.assertNotEqual(layer1[2], bits[1][6])

    def test_forward_extend_reads_a_windowed_row_at_a_full_slot(self):
        self.check("extend")

    def test_forward_decode_reads_a_windowed_row_at_a_full_slot(self):
        self.check("decode")


@unittest.skipUnless(HAVE_LIBRARY, SKIP)
class TheCache(unittest.TestCase):
    def test_the_plain_read_through_the_translation_agrees(self):
        got, want, _ = replay(None)
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()

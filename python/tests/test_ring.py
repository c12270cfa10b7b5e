"""mlcc.ring: the bytes Gloo's and NCCL's rings move."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mlcc.ring import GLOO_MAX_SEGMENT_BYTES, gloo_ring, nccl_ring, ring_bytes  # noqa: E402

SIZES = [1, 2, 3, 7, 1000, 262_144, 1_000_003, 6_553_600, 25 * 2**20 // 4 + 13]


class GlooRing(unittest.TestCase):
    def test_what_each_rank_sends_its_left_neighbour_receives(self):
        for world in range(2, 9):
            for elements in SIZES:
                for es in (2, 4, 8):
                    r = [gloo_ring(elements, es, world, k) for k in range(world)]
                    for k in range(world):
                        self.assertEqual(r[k].sent, r[(k - 1) % world].received,
                                         (elements, es, world, k))

    def test_close_to_the_textbook_and_exact_when_segments_divide(self):
        for world in range(2, 9):
            for elements in SIZES:
                total = 4 * elements
                ideal = 2 * (world - 1) * total / world
                segments = max(-(-total // GLOO_MAX_SEGMENT_BYTES), 2 * world)
                segments = -(-segments // world) * world
                seg = -(-(-(-total // segments)) // 4) * 4
                chunk = segments // world * seg
                for k in range(world):
                    # each phase skips one chunk, which rounding makes up to a chunk off 1/N
                    sent = gloo_ring(elements, 4, world, k).sent
                    self.assertLessEqual(abs(sent - ideal), 2 * chunk, (elements, world, k))
                if total % (segments * 4) == 0:
                    self.assertEqual(gloo_ring(elements, 4, world, 0).sent, ideal)

    def test_nothing_moves_alone_and_bad_ranks_are_refused(self):
        self.assertEqual(gloo_ring(1000, 4, 1, 0), (0, 0))
        self.assertEqual(gloo_ring(0, 4, 3, 0), (0, 0))
        with self.assertRaises(ValueError):
            gloo_ring(10, 4, 3, 3)
        with self.assertRaises(ValueError):
            gloo_ring(10, 0, 3, 0)

    def test_segments_follow_the_one_mib_limit(self):
        # 25 MiB in two ranks: 26 segments of 1 MiB (rounded up to an even count) would be the
        # naive cut; Gloo rounds the count to a multiple of the world and spreads the bytes.
        r = gloo_ring(25 * 2**20 // 4, 4, 2, 0)
        self.assertEqual(r.sent, 25 * 2**20)


class Textbook(unittest.TestCase):
    def test_nccl_is_two_n_minus_one_over_n(self):
        self.assertEqual(nccl_ring(1000, 4, 4), (6000, 6000))
        self.assertEqual(ring_bytes("nccl", 1000, 4, 4, 1), (6000, 6000))
        self.assertEqual(ring_bytes("gloo", 1000, 4, 4, 1), gloo_ring(1000, 4, 4, 1))


if __name__ == "__main__":
    unittest.main()

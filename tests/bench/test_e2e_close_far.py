"""bench._e2e.close_far_fields: produce-to-consume latencies told apart by
how close behind the message before each one was sent."""

from __future__ import annotations

import math

from bench._e2e import CLOSE_GAP_NS, LatencyProbe, close_far_fields


def test_messages_sent_close_behind_the_one_before_are_told_apart():
    # stamps in µs after the first; 1,000/s with the timer late twice,
    # each time catching up with one sent at once behind it
    stamps_us = [0, 1000, 2000, 2300, 2310, 3000, 4000, 4050]
    lat_us = [200, 210, 400, 600, 190, 220, 500, 230]
    fields = close_far_fields([s * 1000 for s in stamps_us], [x * 1000 for x in lat_us])
    # close: 2310 (10 µs behind 2300) and 4050; 2300 is 300 µs behind 2000: not close
    assert fields["close_share"] == 0.25
    assert (fields["close_p50_ms"], fields["close_max_ms"]) == (0.23, 0.23)
    # the others: 0.2, 0.21, 0.22, 0.4, 0.5, 0.6
    assert (fields["far_p50_ms"], fields["far_max_ms"]) == (0.4, 0.6)


def test_the_order_the_consumer_saw_them_in_does_not_matter():
    sent = [3_000_000, 0, 1_000_000, 1_000_000 + CLOSE_GAP_NS - 1]
    lat = [100_000, 200_000, 300_000, 900_000]
    fields = close_far_fields(sent, lat)
    assert fields["close_share"] == 0.25
    assert fields["close_p99_ms"] == 0.9
    assert fields["far_p99_ms"] == 0.3


def test_no_messages_and_no_close_ones():
    empty = close_far_fields([], [])
    assert math.isnan(empty["close_share"]) and math.isnan(empty["far_p50_ms"])
    spaced = close_far_fields([0, 1_000_000], [1, 2])
    assert spaced["close_share"] == 0.0 and math.isnan(spaced["close_p99_ms"])


def test_the_probe_keeps_each_measured_stamp_beside_its_latency():
    probe = LatencyProbe()
    probe.measure_from = 10
    probe.saw((5).to_bytes(8, "big"))  # before the warm-up ended: not measured
    probe.saw((20).to_bytes(8, "big") + b"body")
    assert probe.sent_ns == [20] and len(probe.lat_ns) == 1

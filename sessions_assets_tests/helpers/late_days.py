"""The seed's late-data cases as received days: three on time, and a fourth that brings what arrived late (an
event between two sessions, one that bridges a gap, one before a landing page, and a retried request whose copy is
stamped across midnight). The late-event scenarios and the operations tests run them."""

from __future__ import annotations

from datetime import date

from sessions_assets_tests.helpers.landing import segment

D1, D2, D3, D4 = date(2024, 3, 1), date(2024, 3, 2), date(2024, 3, 3), date(2024, 3, 4)
ON_TIME = {
    D1: [
        segment("r1", "renumbered", "2024-03-01 10:00"),
        segment("m1", "merged", "2024-03-01 09:00"),
        segment("m2", "merged", "2024-03-01 09:10"),
        segment("m3", "merged", "2024-03-01 09:45"),
        segment("m4", "merged", "2024-03-01 09:50"),
    ],
    D2: [
        segment("l1", "landed", "2024-03-02 10:05", kind="page", path="/pricing", referrer="https://a.example/"),
        segment("l2", "landed", "2024-03-02 10:06", kind="page", path="/checkout"),
        segment("m5", "merged", "2024-03-02 15:00"),
        segment("e1", "early", "2024-03-02 23:59:59", "2024-03-02 23:59:59.5"),  # the retry, received first
    ],
    D3: [
        segment("r2", "renumbered", "2024-03-03 10:00"),
        segment("c1", "copied", "2024-03-03 00:00:05", "2024-03-03 00:00:06"),
        segment("e1", "early", "2024-03-03 00:00:03", "2024-03-03 00:00:04"),  # the original, received after
    ],
}
LATE = [
    segment("r3", "renumbered", "2024-03-02 12:00", "2024-03-04 08:00"),  # a session between two others
    segment("m6", "merged", "2024-03-01 09:28", "2024-03-04 08:00"),  # bridges 09:10 .. 09:45
    segment(
        "l0",
        "landed",
        "2024-03-02 09:50",
        "2024-03-04 08:00",
        kind="page",
        path="/blog",
        referrer="https://b.example/",
        campaign={"source": "news", "medium": "email", "name": "spring"},
    ),
    segment("c1", "copied", "2024-03-02 23:59:58", "2024-03-04 09:00"),  # a retry stamped across midnight
]

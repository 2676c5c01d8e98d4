"""The contract's acceptance rules as cases: a line, and the verdict the oracle and the pipeline must give."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal


def T(text: str) -> datetime:
    """'2019-10-23 09:21' or '2019-10-23 09:21:30.5' (UTC) -> aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


GOOD = {
    "messageId": "m-1",
    "type": "track",
    "event": "Page Viewed",
    "userId": "u1",
    "anonymousId": "a-1",
    "timestamp": "2024-03-16T09:00:00Z",
    "receivedAt": "2024-03-16T09:00:05Z",
    "properties": {"path": "/"},
}
DROP = ...  # a field given as DROP is left out of the line


def line(**changes) -> str:
    """A good Segment line with some fields changed (or dropped)."""
    message = {**GOOD, **changes}
    return json.dumps({key: value for key, value in message.items() if value is not DROP})


REJECTED = [
    # malformed_json: not a JSON object
    ("truncated", line()[:30], "malformed_json"),
    ("array", "[1, 2, 3]", "malformed_json"),
    ("number", "42", "malformed_json"),
    ("json_null", "null", "malformed_json"),
    ("json_string", '"{}"', "malformed_json"),
    ("empty_line", "", "malformed_json"),
    ("blank_line", "   \t ", "malformed_json"),
    ("two_objects", line() + line(), "malformed_json"),
    # missing_message_id: missing or empty (non-strings count as missing)
    ("no_message_id", line(messageId=DROP), "missing_message_id"),
    ("empty_message_id", line(messageId=""), "missing_message_id"),
    ("blank_message_id", line(messageId="   "), "missing_message_id"),
    ("null_message_id", line(messageId=None), "missing_message_id"),
    ("fractional_message_id", line(messageId=42.5), "missing_message_id"),
    ("zero_fraction_message_id", line(messageId=42.0), "missing_message_id"),
    ("exponent_message_id", line(messageId=DROP)[:-1] + ', "messageId": 4e1}', "missing_message_id"),
    ("boolean_message_id", line(messageId=True), "missing_message_id"),
    ("object_message_id", line(messageId={"id": "m-1"}), "missing_message_id"),
    # missing_user: both userId and anonymousId missing or empty
    ("no_user_ids", line(userId=DROP, anonymousId=DROP), "missing_user"),
    ("empty_user_ids", line(userId="", anonymousId=""), "missing_user"),
    ("null_and_fractional_user_ids", line(userId=None, anonymousId=7.5), "missing_user"),
    ("integer_of_39_digits", line(userId=None, anonymousId=10**38), "missing_user"),
    ("blank_and_object_user_ids", line(userId=" ", anonymousId={}), "missing_user"),
    # bad_timestamp: timestamp or receivedAt missing or not ISO-8601
    ("words", line(timestamp="yesterday"), "bad_timestamp"),
    ("epoch_number", line(timestamp=1710579600), "bad_timestamp"),
    ("epoch_string", line(timestamp="1710579600"), "bad_timestamp"),
    ("date_only", line(timestamp="2024-03-16"), "bad_timestamp"),
    ("no_timestamp", line(timestamp=DROP), "bad_timestamp"),
    ("null_timestamp", line(timestamp=None), "bad_timestamp"),
    ("no_received_at", line(receivedAt=DROP), "bad_timestamp"),
    ("bad_received_at", line(receivedAt="16/03/2024 09:00"), "bad_timestamp"),
    ("space_instead_of_T", line(timestamp="2024-03-16 09:00:00Z"), "bad_timestamp"),
    ("no_such_day", line(timestamp="2024-02-30T09:00:00Z"), "bad_timestamp"),
    ("hour_24", line(timestamp="2024-03-16T24:00:00Z"), "bad_timestamp"),
    ("offset_25_hours", line(timestamp="2024-03-16T09:00:00+25:00"), "bad_timestamp"),
    ("fraction_without_digits", line(timestamp="2024-03-16T09:00:00.Z"), "bad_timestamp"),
    ("trailing_newline", line(timestamp="2024-03-16T09:00:00Z\n"), "bad_timestamp"),
    ("non_ascii_digits", line(timestamp="٢٠٢٤-03-16T09:00:00Z"), "bad_timestamp"),
    # future_timestamp: more than 1 hour after receivedAt
    ("61_minutes_ahead", line(timestamp="2024-03-16T10:01:00Z", receivedAt="2024-03-16T09:00:00Z"), "future_timestamp"),
    (
        "ahead_by_a_microsecond_over",
        line(timestamp="2024-03-16T10:00:00.000001Z", receivedAt="2024-03-16T09:00:00Z"),
        "future_timestamp",
    ),
    # too_late: more than 400 days before receivedAt, or before 2020-01-01
    (
        "400_days_and_a_second_late",
        line(timestamp="2023-02-10T08:59:59Z", receivedAt="2024-03-16T09:00:00Z"),
        "too_late",
    ),
    ("before_start_date", line(timestamp="2019-12-31T23:59:59.999999Z", receivedAt="2020-01-02T00:00:00Z"), "too_late"),
    (
        "before_start_date_by_offset",
        line(timestamp="2020-01-01T00:30:00+01:00", receivedAt="2020-01-02T00:00:00Z"),
        "too_late",
    ),
    # strictly JSON, and nothing after the object
    ("nan", line()[:-1] + ', "x": NaN}', "malformed_json"),
    ("lone_surrogate", line(event="\ud800"), "malformed_json"),
    ("single_quotes", "{'messageId': 'm-1'}", "malformed_json"),
    ("trailing_comment", line() + " // done", "malformed_json"),
    ("trailing_vertical_tab", line() + "\x0b", "malformed_json"),
    ("second_closing_brace", line() + "}", "malformed_json"),
    ("object_then_array", line() + "[]", "malformed_json"),
    # blank means white space of any kind, no-break spaces included
    ("no_break_space_ids", line(messageId="\u00a0\u2007"), "missing_message_id"),
    ("no_break_space_users", line(userId="\u00a0", anonymousId="\u3000"), "missing_user"),
    # ISO-8601 exactly: nothing around it, real calendar days and clock times
    ("leading_space", line(timestamp=" 2024-03-16T09:00:00Z"), "bad_timestamp"),
    ("trailing_space", line(timestamp="2024-03-16T09:00:00Z "), "bad_timestamp"),
    ("second_60", line(timestamp="2024-03-16T09:00:60Z"), "bad_timestamp"),
    ("minute_60", line(timestamp="2024-03-16T09:60:00Z"), "bad_timestamp"),
    ("offset_60_minutes", line(timestamp="2024-03-16T09:00:00+01:60"), "bad_timestamp"),
    ("offset_hours_only", line(timestamp="2024-03-16T09:00:00+01"), "bad_timestamp"),
    ("year_zero", line(timestamp="0000-03-16T09:00:00Z"), "bad_timestamp"),
    ("lowercase_t", line(timestamp="2024-03-16t09:00:00Z"), "bad_timestamp"),
    # the first broken rule in the table's order is the reason
    ("no_id_and_no_user", line(messageId="", userId="", anonymousId=""), "missing_message_id"),
    ("no_user_and_bad_time", line(userId=None, anonymousId=None, timestamp="soon"), "missing_user"),
    ("bad_received_at_and_ancient_time", line(timestamp="2001-01-01T00:00:00Z", receivedAt="now"), "bad_timestamp"),
]


ACCEPTED = [
    ("on_time", line(), "u1", T("2024-03-16 09:00")),
    ("anonymous_when_user_id_empty", line(userId=""), "a-1", T("2024-03-16 09:00")),
    ("anonymous_when_user_id_null", line(userId=None), "a-1", T("2024-03-16 09:00")),
    ("user_id_without_anonymous_id", line(anonymousId=DROP), "u1", T("2024-03-16 09:00")),
    ("exactly_1_hour_ahead", line(timestamp="2024-03-16T10:00:05Z"), "u1", T("2024-03-16 10:00:05")),
    ("exactly_400_days_late", line(timestamp="2023-02-10T09:00:05Z"), "u1", T("2023-02-10 09:00:05")),
    (
        "on_the_start_date",
        line(timestamp="2020-01-01T00:00:00Z", receivedAt="2020-01-01T00:00:01Z"),
        "u1",
        T("2020-01-01 00:00"),
    ),
    ("offset_with_colon", line(timestamp="2024-03-16T11:00:00+02:00"), "u1", T("2024-03-16 09:00")),
    ("offset_without_colon", line(timestamp="2024-03-16T03:30:00-0530"), "u1", T("2024-03-16 09:00")),
    ("no_offset_means_utc", line(timestamp="2024-03-16T09:00:00"), "u1", T("2024-03-16 09:00")),
    ("no_seconds", line(timestamp="2024-03-16T09:00Z"), "u1", T("2024-03-16 09:00")),
    ("milliseconds", line(timestamp="2024-03-16T09:00:00.250Z"), "u1", T("2024-03-16 09:00:00.250")),
    ("nanoseconds_truncated", line(timestamp="2024-03-16T09:00:00.123456789Z"), "u1", T("2024-03-16 09:00:00.123456")),
    ("object_after_a_tab", "\t" + line(), "u1", T("2024-03-16 09:00")),
    ("spaces_around_the_object", "  " + line() + " \r", "u1", T("2024-03-16 09:00")),
    ("duplicate_keys_keep_the_last", line()[:-1] + ', "userId": "u2"}', "u2", T("2024-03-16 09:00")),
    (
        "offset_across_midnight",
        line(timestamp="2024-03-16T23:30:00-01:00", receivedAt="2024-03-17T00:30:05Z"),
        "u1",
        T("2024-03-17 00:30"),
    ),
]


# (name, line, its ids as read: messageId, userId, anonymousId): an id sent as a JSON integer is its decimal text,
# as Segment's warehouses read it; one with a fraction or an exponent, or of more than 38 digits, is none.
IDS = [
    ("integer_message_id", line(messageId=42), ("42", "u1", "a-1")),
    ("integer_user_id", line(userId=42), ("m-1", "42", "a-1")),
    ("negative_integer_anonymous_id", line(userId=None, anonymousId=-7), ("m-1", None, "-7")),
    ("minus_zero", line(userId=None)[:-1] + ', "anonymousId": -0}', ("m-1", None, "0")),
    ("integer_of_38_digits", line(userId=10**37 + 1), ("m-1", str(10**37 + 1), "a-1")),
    ("integer_past_a_long", line(userId=-(2**63) - 1), ("m-1", str(-(2**63) - 1), "a-1")),
    ("integer_after_a_string", line()[:-1] + ', "userId": 7}', ("m-1", "7", "a-1")),
    ("zero_fraction_user_id", line(userId=7.0), ("m-1", None, "a-1")),
    ("exponent_user_id", line(userId=DROP)[:-1] + ', "userId": 7E0}', ("m-1", None, "a-1")),
    ("integer_of_39_digits_user_id", line(userId=10**38), ("m-1", None, "a-1")),
    ("boolean_user_id", line(userId=True), ("m-1", None, "a-1")),
    ("integer_in_a_string_as_sent", line(userId="007"), ("m-1", "007", "a-1")),
]


def with_revenue(raw: str) -> str:
    """A good line whose ``properties.revenue`` is the JSON text ``raw``."""
    return line(properties=DROP)[:-1] + f', "properties": {{"revenue": {raw}}}}}'


# (properties.revenue as written, what it counts as)
REVENUES = [
    ("19.99", Decimal("19.990000")),
    ("5", Decimal("5.000000")),
    ("1.0000005", Decimal("1.000001")),  # half up
    ("-2.50", Decimal("-2.500000")),
    ("1.5e2", Decimal("150.000000")),
    ('"19.99"', None),  # text is not a number
    ("true", None),
    ("null", None),
    ("1e40", None),  # more than DECIMAL(38,6) holds
    ("1e9999999999999999999999", None),  # a double: infinite
    ("0.1234564999999999999999999999999999999999", Decimal("0.123457")),  # 40 digits: a double, 0.1234565
]

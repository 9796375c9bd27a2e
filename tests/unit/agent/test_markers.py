"""The perf-marker parser on recorded-style samples of XRootD, dCache and GridFTP streams."""

from __future__ import annotations

import pytest
from tpcmesh_agent.markers import MarkerParser, MarkerStreamError, parse

XROOTD = (
    "Perf Marker\nTimestamp: 1795305724\nStripe Index: 0\nStripe Bytes Transferred: 0\nTotal Stripe Count: 1\n"
    "RemoteConnections: tcp:127.0.1.1:8444\nEnd\n"
    "Perf Marker\nTimestamp: 1795305729\nStripe Index: 0\nStripe Bytes Transferred: 734003200\n"
    "Total Stripe Count: 1\nRemoteConnections: tcp:127.0.1.1:8444\nEnd\n"
    "success: Created"  # XRootD sends no trailing newline
)

DCACHE = (
    "Perf Marker\n\tTimestamp: 1700000000\n\tState: Running\n\tState description: transfer\n\tStripe Index: 0\n"
    "\tStripe Start Time: 1700000000\n\tStripe Last Transferred: 1700000004\n\tStripe Transfer Time: 4\n"
    "\tStripe Bytes Transferred: 1048576\n\tStripe Status: RUNNING\n\tTotal Stripe Count: 1\n"
    "\tRemoteConnections: tcp:192.0.2.10:20000\nEnd\n"
    "success: Created\n"
)

MULTI = (
    "Perf Marker\nTimestamp: 10\nStripe Index: 0\nStripe Bytes Transferred: 100\nTotal Stripe Count: 2\n"
    "RemoteConnections: tcp:h:1,tcp:h:1\nEnd\n"
    "Perf Marker\nTimestamp: 10\nStripe Index: 1\nStripe Bytes Transferred: 50\nTotal Stripe Count: 2\nEnd\n"
    "Perf Marker\nTimestamp: 15\nStripe Index: 0\nStripe Bytes Transferred: 300\nTotal Stripe Count: 2\nEnd\n"
    "success: Created\n"
)

GRIDFTP = (
    "112-Perf Marker\r\n112-Timestamp:  1795305724.5\r\n112-Stripe Index: 0\r\n"
    "112-Stripe Bytes Transferred: 4194304\r\n112-Total Stripe Count: 1\r\n112 End.\r\n"
    "Success\n"
)


def test_xrootd_stream_markers_and_success():
    result = parse(XROOTD)
    assert result.ok and result.message == "Created"
    assert [m.stripe_bytes for m in result.markers] == [0, 734003200]
    assert result.markers[1].timestamp == 1795305729
    assert result.markers[0].remote_connections == ["tcp:127.0.1.1:8444"]
    assert result.bytes_transferred == 734003200


def test_dcache_tab_indented_keys():
    result = parse(DCACHE)
    assert result.ok
    assert len(result.markers) == 1
    assert result.markers[0].stripe_bytes == 1048576
    assert result.markers[0].remote_connections == ["tcp:192.0.2.10:20000"]


def test_multi_stripe_sums_last_value_of_each_stripe():
    result = parse(MULTI)
    assert result.bytes_transferred == 350
    assert result.markers[0].remote_connections == ["tcp:h:1", "tcp:h:1"]
    assert result.markers[0].stripe_count == 2


def test_gridftp_control_channel_markers():
    result = parse(GRIDFTP)
    assert result.ok and result.message == "Success"
    assert result.markers[0].timestamp == 1795305724.5
    assert result.markers[0].stripe_bytes == 4194304


@pytest.mark.parametrize(
    ("final", "ok", "message"),
    [
        ("success: Created", True, "Created"),
        ("Success", True, "Success"),
        ("failure: Remote side failed with status code 404", False, "Remote side failed with status code 404"),
        ("aborted: cancelled by user", False, "cancelled by user"),
        ("Failed: connection reset", False, "connection reset"),
    ],
)
def test_final_lines(final, ok, message):
    result = parse(XROOTD.rsplit("\n", 1)[0] + "\n" + final)
    assert result.ok is ok
    assert result.message == message


def test_no_final_line_is_a_failure():
    result = parse(XROOTD.rsplit("\n", 1)[0] + "\n")
    assert not result.ok
    assert "without a final" in result.message
    assert len(result.markers) == 2


def test_truncated_inside_block_is_a_failure():
    result = parse("Perf Marker\nTimestamp: 1\nStripe Bytes Trans")
    assert not result.ok
    assert "inside a Perf Marker block" in result.message
    assert result.markers == []


def test_empty_body_is_a_failure():
    assert not parse("").ok


def test_incremental_feed_byte_by_byte_gives_the_same_result():
    parser = MarkerParser()
    seen = []
    for i in range(len(XROOTD)):
        seen.extend(parser.feed(XROOTD[i].encode()))
    result = parser.close()
    assert [m.stripe_bytes for m in seen] == [0, 734003200]
    assert result.ok and result.message == "Created"


def test_bad_number_names_the_line():
    with pytest.raises(MarkerStreamError, match="Stripe Bytes Transferred: lots"):
        parse("Perf Marker\nStripe Bytes Transferred: lots\nEnd\n")


def test_html_error_page_is_a_failure_with_context():
    result = parse("<html><body>400 Unknown</body></html>\n")
    assert not result.ok
    assert "400 Unknown" in result.message


# XRootD 5.8.1 (the images) answering a COPY whose Source has no such file: 500 and the failure line alone (5.5.3
# answers the same copy 201, then the same line)
XROOTD_58_SOURCE_404 = (
    "failure: Remote side [::ffff:127.0.3.2] failed with status code 404 while fetching remote size, "
    "local=/incoming/02c2bb72/missing.dat, remote=https://127.0.3.1:38444/sets/3x1000003/missing.dat\n"
)


def test_a_copy_that_xrootd_58_fails_before_its_first_byte_reads_as_a_failed_copy():
    from tpcmesh_agent.movers.xrootd_https import failed_before_first_byte

    assert failed_before_first_byte(500, XROOTD_58_SOURCE_404)
    p = MarkerParser()
    p.feed(XROOTD_58_SOURCE_404)
    result = p.close()
    assert not result.ok and "status code 404 while fetching remote size" in result.message and not result.markers
    # a refusal or an error page without the line stays the local instance's answer
    assert not failed_before_first_byte(500, "<html>Internal error</html>")
    assert not failed_before_first_byte(403, "failure: no")
    assert not failed_before_first_byte(401, "")

"""A stream's body after `[DONE]`: read to its end when the SDK closes it, within bounds.

The body is handed over in pieces as httpcore would; the reader is the openai
SDK's own SSE decoder, which stops at `[DONE]` and closes the response.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from openai._streaming import SSEDecoder

from chat.llm.watch import AFTER_DONE_S, Watch, WatchedStream


class Body:
    """A response body: its pieces, then what comes after `[DONE]`, `gap_s` apart."""

    def __init__(self, pieces: list[bytes], after: list[bytes] = (), gap_s: float = 0.0) -> None:
        self.pieces, self.after, self.gap_s = pieces, list(after), gap_s
        self.read_to_end = False
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        for piece in self.after:
            time.sleep(self.gap_s)
            yield piece
        self.read_to_end = True

    def close(self) -> None:
        self.closed = True


def watched(body: Body, stop: threading.Event | None = None) -> WatchedStream:
    return WatchedStream(body, Watch(stop=stop, call_s=60, attempt_s=60))


def read_like_the_sdk(stream: WatchedStream) -> list[str]:
    """What the SDK reads: events up to `[DONE]`, then it closes the response."""
    events = []
    for event in SSEDecoder().iter_bytes(iter(stream)):
        if event.data.startswith("[DONE]"):
            break
        events.append(event.data)
    stream.close()
    return events


def test_the_body_s_end_is_read_when_done_came_in_two_pieces():
    body = Body([b'data: {"a": 1}\n\ndata: [DO', b"NE]\n\n"], after=[b""])
    assert read_like_the_sdk(watched(body)) == ['{"a": 1}']
    assert body.read_to_end
    assert body.closed


def test_crlf_lines_and_done_without_a_space_are_done_too():
    for ending in (b'data: {"a": 1}\r\n\r\ndata: [DONE]\r\n\r\n', b"data:[DONE]\n\n"):
        body = Body([ending], after=[b""])
        read_like_the_sdk(watched(body))
        assert body.read_to_end, ending


def test_done_inside_an_answer_s_text_is_not_the_end():
    stream = watched(Body([b'data: {"content": "data: [DONE]"}\n\n'], after=[b""]))
    for _ in stream:
        pass
    assert not stream.done


def test_a_server_that_keeps_sending_after_done_is_read_for_half_a_second_at_most():
    body = Body([b"data: [DONE]\n\n"], after=[b": keep-alive\n\n"] * 200, gap_s=0.02)
    started = time.monotonic()
    read_like_the_sdk(watched(body))
    assert time.monotonic() - started < AFTER_DONE_S + 0.3
    assert not body.read_to_end  # the connection is given up, as before
    assert body.closed


def test_a_large_rest_is_not_read_whole():
    body = Body([b"data: [DONE]\n\n"], after=[b"x" * 70_000, b"y" * 10])
    read_like_the_sdk(watched(body))
    assert not body.read_to_end
    assert body.closed


def test_a_stopped_call_does_not_wait_for_the_rest():
    stop = threading.Event()
    body = Body([b"data: [DONE]\n\n"], after=[b": keep-alive\n\n"] * 200, gap_s=0.02)
    stream = watched(body, stop)
    events = SSEDecoder().iter_bytes(iter(stream))
    next(events)  # [DONE]
    stop.set()  # the run is cancelled as the SDK closes the response
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 0.1
    assert body.closed


def test_a_stream_closed_before_done_is_not_read_on():
    body = Body([b'data: {"a": 1}\n\n'], after=[b'data: {"b": 2}\n\n'])
    stream = watched(body)
    next(iter(stream))
    stream.close()  # an error, a stop: the SDK gives up on the stream
    assert not body.read_to_end
    assert body.closed

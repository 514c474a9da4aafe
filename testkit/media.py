"""Real recordings made on the spot with PyAV (FFmpeg's libraries), for upload tests.

The PyAV wheels ship FFmpeg's GSM decoder but no GSM encoder, so :func:`gsm_bytes` lays out
raw GSM 06.10 full-rate frames itself: 33 bytes per 20 ms (160 samples at 8 kHz), each
opening with the 0xD signature nibble, the rest pseudo-random parameters any decoder
accepts. That is the bitstream Asterisk/XCALLY writes to ``.gsm`` files.
"""

from __future__ import annotations

import io
import math
import random
import struct

import av

GSM_FRAME_MS = 20


def gsm_bytes(seconds: float, seed: int = 1) -> bytes:
    """``seconds`` of raw GSM 06.10 (8 kHz mono)."""
    rnd = random.Random(seed)
    frames = round(seconds * 1000 / GSM_FRAME_MS)
    return b"".join(bytes([0xD0 | rnd.randrange(16)]) + rnd.randbytes(32) for _ in range(frames))


def mp4_bytes(seconds: float, rate: int = 16000) -> bytes:
    """An MP4 holding ``seconds`` of a 440 Hz tone as AAC mono, encoded by FFmpeg."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        step = 1024
        total = int(seconds * rate)
        for start in range(0, total, step):
            frame = av.AudioFrame(format="s16", layout="mono", samples=step)
            frame.planes[0].update(
                b"".join(
                    struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * (start + i) / rate)))
                    for i in range(step)
                )
            )
            frame.sample_rate = rate
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()

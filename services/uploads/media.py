"""Recordings to WAV through FFmpeg's libraries (the PyAV wheels ship them).

GSM (8 kHz mono, raw ``.gsm`` as Asterisk/XCALLY writes it, or GSM in a WAV container) and
MP4 audio are decoded and written as 16-bit PCM WAV at the source's rate and channel layout,
what ``ffmpeg -i in out.wav`` does. The duration is the decoded audio's (samples / rate),
the figure ``ffprobe`` reports for these files; it feeds ``call_details.duration_ms`` and
``conversations.handling_time``. Other audio is not converted: it keeps the upload's blob, as
in Rails, and is only probed for its duration.

An input FFmpeg cannot decode is terminal (``MediaInvalid``); the libraries failing to load
or running out of memory is retryable (``MediaToolUnavailable``), the equivalent of the
seed's ffmpeg spawn failure.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import PurePosixPath

from services.uploads.errors import media_invalid, media_tool_unavailable

#: Extensions converted to WAV; anything else shares the upload's blob.
CONVERTED = {".gsm": "gsm", ".mp4": None, ".m4a": None}
#: Extensions FFmpeg's probing cannot recognise on its own (raw GSM has no header).
_FORCED_FORMATS = {".gsm": "gsm"}


@dataclass(frozen=True)
class Media:
    """A recording ready to attach: WAV bytes (``None``: keep the original) and duration."""

    wav: bytes | None
    duration_ms: int


def needs_conversion(filename: str) -> bool:
    return PurePosixPath(filename.lower()).suffix in CONVERTED


def _open(data: bytes, filename: str) -> object:
    try:
        import av
    except ImportError as exc:  # the wheel is missing or its libraries do not load
        raise media_tool_unavailable(f"FFmpeg libraries unavailable: {exc}") from exc
    suffix = PurePosixPath(filename.lower()).suffix
    try:
        return av.open(io.BytesIO(data), mode="r", format=_FORCED_FORMATS.get(suffix))
    except av.FFmpegError as exc:
        raise media_invalid(f"{filename}: FFmpeg cannot read it ({exc})") from exc


def prepare(data: bytes, filename: str) -> Media:
    """Decode ``data`` (named ``filename``); WAV bytes for GSM/MP4, duration for all.

    Raises:
      UploadProcessingFailed: ``MediaInvalid`` when the recording cannot be decoded.
      UploadProcessingRetryable: ``MediaToolUnavailable`` when FFmpeg cannot run.
    """
    import av

    if not data:
        raise media_invalid(f"{filename}: empty recording")
    convert = needs_conversion(filename)
    source = _open(data, filename)
    assert isinstance(source, av.container.InputContainer)
    out = io.BytesIO()
    samples = 0
    rate = 0
    try:
        with source:
            if not source.streams.audio:
                raise media_invalid(f"{filename}: no audio stream")
            stream = source.streams.audio[0]
            rate = stream.codec_context.sample_rate or stream.rate or 0
            sink = av.open(out, mode="w", format="wav") if convert else None
            target = None
            if sink is not None:
                channels = stream.codec_context.channels
                layout = "mono" if channels == 1 else stream.layout.name
                target = sink.add_stream("pcm_s16le", rate=rate, layout=layout)
            for frame in source.decode(stream):
                samples += frame.samples
                if sink is not None and target is not None:
                    frame.pts = None
                    for packet in target.encode(frame):
                        sink.mux(packet)
            if sink is not None and target is not None:
                for packet in target.encode(None):
                    sink.mux(packet)
                sink.close()
    except MemoryError as exc:
        raise media_tool_unavailable(f"{filename}: out of memory decoding") from exc
    except av.FFmpegError as exc:
        raise media_invalid(f"{filename}: FFmpeg cannot decode it ({exc})") from exc
    if samples == 0 or rate <= 0:
        raise media_invalid(f"{filename}: no audio decoded")
    return Media(wav=out.getvalue() if convert else None, duration_ms=samples * 1000 // rate)

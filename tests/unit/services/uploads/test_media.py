"""Recordings through FFmpeg (PyAV's libraries): GSM and MP4 become WAV with their
duration, other audio is only measured, and what cannot be decoded is terminal."""

from __future__ import annotations

import io
import zipfile

import av
import pytest

from services.uploads.archive import recording_of
from services.uploads.call_metadata import call_record
from services.uploads.errors import UploadProcessingFailed
from services.uploads.media import prepare
from testkit.media import gsm_bytes, mp4_bytes


def _wav_stream(data: bytes) -> tuple[str, int, int, float]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.codec_context.name, stream.rate, stream.codec_context.channels, samples


def test_gsm_8khz_mono_becomes_a_wav_of_the_same_duration() -> None:
    media = prepare(gsm_bytes(seconds=5), "20261130-call.gsm")

    assert media.duration_ms == 5000
    assert media.wav is not None and media.wav[:4] == b"RIFF" and media.wav[8:12] == b"WAVE"
    assert _wav_stream(media.wav) == ("pcm_s16le", 8000, 1, 40000)


def test_mp4_becomes_a_wav_and_its_duration_is_measured() -> None:
    media = prepare(mp4_bytes(seconds=3), "meeting.mp4")

    assert media.wav is not None
    codec, rate, channels, samples = _wav_stream(media.wav)
    assert (codec, rate, channels) == ("pcm_s16le", 16000, 1)
    # AAC adds encoder padding of at most one frame (1024 samples at 16 kHz: 64 ms)
    assert 3000 <= media.duration_ms <= 3064
    assert samples * 1000 // rate == media.duration_ms


def test_a_wav_is_measured_and_not_converted() -> None:
    wav = prepare(gsm_bytes(seconds=1), "a.gsm").wav
    assert wav is not None

    media = prepare(wav, "already.wav")

    assert media.wav is None
    assert media.duration_ms == 1000


@pytest.mark.parametrize(
    ("data", "name"),
    [(b"not a video at all" * 50, "x.mp4"), (b"\x00" * 20, "short.gsm"), (b"", "empty.gsm")],
)
def test_undecodable_media_is_terminal(data: bytes, name: str) -> None:
    with pytest.raises(UploadProcessingFailed) as raised:
        prepare(data, name)

    assert raised.value.error_class == "MediaInvalid"


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_yields_its_one_recording() -> None:
    data = _zip({"calls/c1.gsm": b"abc", "__MACOSX/._c1.gsm": b"x", "notes/": b""})

    assert recording_of(data, "batch.zip") == (b"abc", "c1.gsm")


@pytest.mark.parametrize(
    "data",
    [
        _zip({"a.gsm": b"1", "b.gsm": b"2"}),
        _zip({"readme.txt": b"no recording"}),
        b"PK\x03\x04 truncated",
    ],
)
def test_zip_validation_errors_are_terminal(data: bytes) -> None:
    with pytest.raises(UploadProcessingFailed) as raised:
        recording_of(data, "batch.zip")

    assert raised.value.error_class == "ArchiveInvalid"


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"uniqueid": ""},
        {"uniqueid": "1", "agent": "someone"},
        {"uniqueid": "1", "start_time": "last tuesday"},
        {"uniqueid": "1", "direction": "sideways"},
        ["not", "an", "object"],
    ],
)
def test_metadata_errors_are_terminal(metadata: object) -> None:
    with pytest.raises(UploadProcessingFailed) as raised:
        call_record("xcally", metadata)

    assert raised.value.error_class == "MetadataInvalid"


def test_each_source_reads_its_own_field_names() -> None:
    xcally = call_record("xcally", {"uniqueid": 17, "agent": {"email": "A@B.C"}})
    kaia = call_record(
        "outreach_kaia", {"call_id": "k-1", "user": {"id": "u1"}, "prospect": {"phone": "+1"}}
    )

    assert (xcally.call_id, xcally.agent.email) == ("17", "a@b.c")
    assert (kaia.call_id, kaia.agent.external_id, kaia.customer.phone) == ("k-1", "u1", "+1")

"""Bytes to text: a byte-order mark, else UTF-8, else the declared charset (or an HTML
page's ``<meta charset>``), else the legacy encoding charset-normalizer detects.

:func:`decode_text` raises :class:`NotText` when the bytes are not text (a NUL byte, no
encoding fits) or do not decode under their own byte-order mark; the extractor
(:mod:`services.indexing.extract`) turns that into a reason a user can act on.
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

from shared.errors import SpeedtierError

# UTF-32 before UTF-16: the UTF-32-LE BOM starts with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_DETECTION_SAMPLE = 256 * 1024
# What charset-normalizer may answer: legacy encodings people actually save text in. Left
# to all its candidates it reads short Western text as hp_roman8, mac_iceland or cp775.
_LEGACY_ENCODINGS = [
    "cp1252", "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258",
    "koi8_r", "koi8_u", "cp874", "cp932", "euc_jp", "iso2022_jp", "gb18030", "big5", "cp949",
    "euc_kr", "shift_jis", "tis_620",
]  # fmt: skip
# On short Western text charset-normalizer scores cp1250 or cp1257 as high as, or a little
# higher than, cp1252 (a superset of latin-1's printable range) and picks them, turning
# "niño" into "niňo". cp1252 is by far the likeliest legacy encoding: it wins when it
# scores within these margins of the best.
_CP1252_CHAOS_SLACK = 0.15
_CP1252_COHERENCE_SLACK = 0.1
# Browsers look for an HTML page's <meta charset> in its first 1024 bytes.
_META_CHARSET_BYTES = 1024
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


class NotText(SpeedtierError, ValueError):
    """The bytes are not text; ``damaged`` when they carry a byte-order mark they do not
    decode under (truncated or corrupt text, rather than binary content)."""

    def __init__(self, message: str, *, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged


def decode_text(data: bytes, charset: str | None, *, html: bool) -> str:
    """Text from bytes: a BOM, else UTF-8, else the declared charset (or an HTML page's
    ``<meta charset>``), else what charset-normalizer detects. NUL bytes mean binary."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise NotText(f"not {encoding} despite its byte-order mark", damaged=True) from exc
    if b"\x00" in data:
        raise NotText("a NUL byte: binary content")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_invalid = exc.start
    hint = charset or (_meta_charset(data) if html else None)
    if hint is not None and _codec_name(hint) not in (None, "utf-8"):
        try:
            return data.decode(hint)
        except UnicodeDecodeError:
            pass
    detected = _detect_encoding(data, first_invalid)
    if detected is None:
        raise NotText("no encoding fits")
    return data.decode(detected, errors="replace")


def _codec_name(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _meta_charset(data: bytes) -> str | None:
    match = _META_CHARSET.search(data, 0, _META_CHARSET_BYTES)
    return match.group(1).decode("ascii") if match is not None else None


def _detect_encoding(data: bytes, first_invalid: int) -> str | None:
    """The legacy encoding of ``data``, judged on a sample around its first non-UTF-8 byte
    (charset-normalizer decodes what it is given once per candidate encoding)."""
    sample = data
    if len(data) > _DETECTION_SAMPLE:
        # Cut at line ends: no multibyte encoding uses 0x0A inside a character.
        low = max(0, first_invalid - _DETECTION_SAMPLE // 2)
        newline = data.find(b"\n", low, first_invalid)
        start = newline + 1 if newline >= 0 else low
        end = data.rfind(b"\n", start, start + _DETECTION_SAMPLE)
        sample = data[start : end + 1 if end >= 0 else start + _DETECTION_SAMPLE]
    matches = from_bytes(sample, cp_isolation=_LEGACY_ENCODINGS)
    best = matches.best()
    if best is None:
        return None
    for match in matches:
        if (
            match.encoding == "cp1252"
            and match.chaos <= best.chaos + _CP1252_CHAOS_SLACK
            and match.coherence >= best.coherence - _CP1252_COHERENCE_SLACK
        ):
            return "cp1252"
    return best.encoding

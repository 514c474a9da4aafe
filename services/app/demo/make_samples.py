"""Build the demo's binary sample files: ``installation-manual.docx`` and ``datasheet.pdf``.

Run once by hand (``python -m services.app.demo.make_samples``); the files it writes are
committed under ``services/app/demo/samples/files/`` next to the text samples, so the demo
itself needs neither step. The DOCX is made with python-docx; the PDF is written by hand
(one font, one content stream per page) so it stays a few kilobytes and its text is exactly
what pypdf extracts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import docx

FILES = Path(__file__).resolve().parent / "samples" / "files"
#: Fixed metadata, so running the script again changes as little as possible.
CREATED = dt.datetime(2026, 1, 15, 9, 0, tzinfo=dt.UTC)

MANUAL: Sequence[tuple[str, str]] = (
    ("title", "Nimbus Greenhouse Controller: installation manual"),
    ("heading", "Before you start"),
    (
        "text",
        "You need a drill with a 6 mm bit, four wall plugs, a small flat screwdriver for the "
        "terminal block and the eight-digit pairing code printed under the controller's "
        "cover. Switch off the power to every heater, fan and valve circuit first.",
    ),
    ("heading", "Mounting"),
    (
        "text",
        "Mount the controller 1.2 to 1.6 metres above the ground, out of direct sun and away "
        "from sprinklers. The enclosure is rated IP65, but the cable glands only seal when the "
        "cables enter from below.",
    ),
    ("heading", "Wiring the outputs"),
    (
        "text",
        "Terminals V1 to V4 drive 24 V DC vent motors. Relays R1 to R6 switch heaters and fans "
        "up to 16 A each; use a contactor for larger loads. Terminals W1 to W8 drive 24 V AC "
        "irrigation valves and share the common wire C.",
    ),
    ("heading", "First start"),
    (
        "text",
        "Restore the power. The status LED blinks blue while the controller waits for the app: "
        "choose Add controller, enter the pairing code, and join a 2.4 GHz Wi-Fi network. The "
        "first firmware update starts by itself and takes about five minutes.",
    ),
    ("heading", "Checking the installation"),
    (
        "text",
        "In the app, open Outputs and test each vent, relay and valve: every output runs for "
        "ten seconds. A vent that moves the wrong way has its two motor wires swapped.",
    ),
)

DATASHEET: Sequence[Sequence[str]] = (
    (
        "Nimbus Greenhouse Controller - technical data sheet",
        "",
        "Power supply: 100-240 V AC, 50/60 Hz; internal 24 V DC for vent motors.",
        "Power use: 4 W idle, 9 W with the radio and display active.",
        "Outputs: 4 vent motors (24 V DC, 2 A each), 6 relays (16 A each),",
        "8 irrigation valves (24 V AC, 0.5 A each).",
        "Climate zones: up to 12 (Pro plan), 4 (Grower), 1 (Seedling).",
        "Frost protection: default threshold 2 degrees Celsius, adjustable from -5 to 10;",
        "runs on the controller without a network connection.",
        "Operating temperature: -20 to 50 degrees Celsius; humidity up to 95 percent.",
        "Enclosure: IP65 polycarbonate, 220 x 160 x 70 mm, 1.1 kg.",
    ),
    (
        "Radio and network",
        "",
        "Sensor radio: 868 MHz (Europe) or 915 MHz (North America), range about 120 m.",
        "Wi-Fi: 802.11 b/g/n, 2.4 GHz only. Ethernet: 10/100 Mbit/s.",
        "Sensors per controller: up to 48, plus 4 RX-1 repeaters.",
        "Local REST API (Pro plan): HTTP on port 80, 10 requests per second per token.",
        "Certifications: CE, UKCA, FCC part 15.",
        "Warranty: 2 years on the controller, 1 year on sensors.",
    ),
)


def build_manual(path: Path) -> None:
    document = docx.Document()
    properties = document.core_properties
    properties.author = "Fernleaf Systems"
    properties.title = "Nimbus installation manual"
    properties.created = properties.modified = CREATED.replace(tzinfo=None)
    for kind, text in MANUAL:
        if kind == "title":
            document.add_heading(text, level=0)
        elif kind == "heading":
            document.add_heading(text, level=1)
        else:
            document.add_paragraph(text)
    table = document.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Terminal", "Drives", "Limit"), strict=True):
        cell.text = text
    for row in (("V1-V4", "vent motors", "24 V DC, 2 A"), ("R1-R6", "heaters, fans", "16 A")):
        for cell, text in zip(table.add_row().cells, row, strict=True):
            cell.text = text
    document.save(str(path))


def _pdf_text(line: str) -> str:
    escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return f"({escaped})"


def _page_stream(lines: Sequence[str]) -> bytes:
    title, *rest = lines
    ops = ["BT", "/F1 16 Tf", "72 720 Td", "20 TL", f"{_pdf_text(title)} Tj", "/F1 11 Tf", "16 TL"]
    ops += [f"T* {_pdf_text(line)} Tj" for line in rest]
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def pdf_bytes(pages: Sequence[Sequence[str]]) -> bytes:
    """A minimal PDF 1.4: one Helvetica text stream per page, with a correct xref table."""
    first_page = 4
    page_ids = [first_page + 2 * i for i in range(len(pages))]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: (
            f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] "
            f"/Count {len(pages)} >>"
        ).encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for page_id, lines in zip(page_ids, pages, strict=True):
        stream = _page_stream(lines)
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>"
        ).encode()
        objects[page_id + 1] = (
            f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream"
        )
    info_id = max(objects) + 1
    objects[info_id] = b"<< /Title (Nimbus technical data sheet) /Author (Fernleaf Systems) >>"

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {info_id + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offsets[n]:010d} 00000 n \n".encode() for n in range(1, info_id + 1))
    out += (
        f"trailer\n<< /Size {info_id + 1} /Root 1 0 R /Info {info_id} 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def main() -> None:
    FILES.mkdir(parents=True, exist_ok=True)
    build_manual(FILES / "installation-manual.docx")
    (FILES / "datasheet.pdf").write_bytes(pdf_bytes(DATASHEET))
    for name in ("installation-manual.docx", "datasheet.pdf"):
        print(f"wrote {FILES / name} ({(FILES / name).stat().st_size} bytes)")


if __name__ == "__main__":
    main()

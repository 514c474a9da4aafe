"""OCR throughput: pages per second of :func:`services.indexing.extract.extract` on scanned
PDFs (one JPEG page image each, no text layer: :mod:`testkit.scans`), on this machine's CPU.

Each page shows ``lines`` lines of text; pages are rendered at 100 dpi (850x1100) and 200 dpi
(1700x2200). The engine is loaded (and warmed up on one page) before timing; the load time
is reported apart. Every page's text is checked against what was rendered (words found).
The 1-minute load average before and after is reported: the machine is shared, so the
figures are a floor.

  python -m bench.ocr             # 10 pages per resolution
  python -m bench.ocr --quick     # 3 pages per resolution
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.common import markdown_table, rnd, write_result
from services.indexing import ocr
from services.indexing.extract import extract
from services.indexing.ocr import OcrLimits
from testkit.scans import scanned_pdf

RESOLUTIONS = {"100 dpi": (850, 1100), "200 dpi": (1700, 2200)}


def _page_lines(page: int, lines: int) -> list[str]:
    return [
        f"Section {page} line {line} covers refunds invoices and shipping" for line in range(lines)
    ]


def run(pages: int, lines: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    ocr._load_engine()
    load_seconds = time.perf_counter() - started
    extract(scanned_pdf([["Warm up"]]), content_type="application/pdf", filename=None)
    rows: list[dict[str, Any]] = []
    limits = OcrLimits(max_pages=pages, timeout_seconds=3600.0)
    for name, size in RESOLUTIONS.items():
        content = [_page_lines(page, lines) for page in range(pages)]
        pdf = scanned_pdf(content, size=size)
        started = time.perf_counter()
        text = extract(pdf, content_type="application/pdf", filename=None, ocr=limits).text
        seconds = time.perf_counter() - started
        expected = {word.lower() for page in content for line in page for word in line.split()}
        found = {word.lower() for word in text.split()}
        rows.append(
            {
                "resolution": name,
                "pages": pages,
                "seconds": rnd(seconds, 2),
                "pages_per_second": rnd(pages / seconds, 2),
                "words_found": rnd(len(expected & found) / len(expected), 3),
            }
        )
    return {
        "engine_load_seconds": rnd(load_seconds, 2),
        "lines_per_page": lines,
        "cpus": os.cpu_count(),
        "load_average_before": rnd(load_before, 2),
        "load_average_after": rnd(os.getloadavg()[0], 2),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lines", type=int, default=12)
    args = parser.parse_args()
    result = run(3 if args.quick else 10, args.lines)
    path = write_result("ocr", result)
    print(
        markdown_table(
            ["resolution", "pages", "seconds", "pages/s", "words found"],
            [
                [r["resolution"], r["pages"], r["seconds"], r["pages_per_second"], r["words_found"]]
                for r in result["rows"]
            ],
        )
    )
    print(
        f"engine load {result['engine_load_seconds']} s; load average "
        f"{result['load_average_before']} -> {result['load_average_after']} "
        f"on {result['cpus']} CPUs; {path}"
    )


if __name__ == "__main__":
    main()

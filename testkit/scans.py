"""Scanned PDFs for OCR tests and benchmarks: text rendered to an image with Pillow and
wrapped in a PDF with no text layer (one image per page, as a scanner writes it)."""

from __future__ import annotations

import io
from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

#: A page at 100 dpi (US Letter): what a small office scanner sends.
PAGE_SIZE = (850, 1100)


def scanned_page(lines: Sequence[str], *, size: tuple[int, int] = PAGE_SIZE) -> Image.Image:
    """A greyscale page image showing ``lines`` in Pillow's bundled font, 32 px high."""
    page = Image.new("L", size, 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=32)
    for row, line in enumerate(lines):
        draw.text((60, 80 + row * 60), line, fill=0, font=font)
    return page


def scanned_pdf(pages: Sequence[Sequence[str]], *, size: tuple[int, int] = PAGE_SIZE) -> bytes:
    """A PDF of one scanned image per page (an empty line list is a blank page)."""
    images = [scanned_page(lines, size=size).convert("RGB") for lines in pages]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", save_all=True, append_images=images[1:], resolution=100.0)
    return buffer.getvalue()

"""Uploaded documents to text: every input is made here, in memory."""

from __future__ import annotations

import io
import zipfile

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from services.indexing.extract import (
    DOCX,
    HTML,
    MARKDOWN,
    MAX_BYTES,
    NO_PDF_TEXT,
    NO_TEXT,
    PASSWORD_PROTECTED,
    PDF,
    TEXT,
    UNREADABLE,
    UNSUPPORTED,
    ZERO_BYTES,
    Extracted,
    ExtractionFailed,
    _StyleNames,
    extract,
)
from shared.errors import Unrecoverable

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
FRENCH = (  # cp1252's typographic quotes and dashes (\u2013, \u2019) are the point
    "Le café de la gare propose une crème brûlée “maison” \u2013 très appréciée. Ça coûte 5 €.\n"
    "La façade a été rénovée l\u2019été dernier. Les clients reçoivent un reçu détaillé.\n"
    "Pour toute réclamation, écrivez au service après-vente avant la fin du délai prévu.\n"
    "Nous remboursons les commandes annulées sous cinq jours ouvrés, frais de port compris.\n"
)
JAPANESE = (
    "この文書は返金手続きについて説明します。お客様の口座には五営業日以内に返金されます。\n"
    "配送は毎朝倉庫から行われます。ご注文の商品が届かない場合は、サポートまでご連絡ください。\n"
    "返品の際は、購入時の箱と領収書を保管してください。交換は三十日以内に受け付けます。\n"
)


def run(
    data: bytes, content_type: str | None = None, filename: str | None = None, **kw: int
) -> Extracted:
    return extract(data, content_type=content_type, filename=filename, **kw)


def failure(data: bytes, content_type: str | None = None, filename: str | None = None) -> str:
    with pytest.raises(ExtractionFailed) as caught:
        run(data, content_type, filename)
    return caught.value.reason


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica text line per string (Tj), or a blank page."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, once the pages are numbered
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for lines in pages:
        ops = ["BT /F1 12 Tf 72 720 Td 16 TL", *(f"({line}) Tj T*" for line in lines), "ET"]
        stream = "\n".join(ops if lines else []).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    info = b""
    if title is not None:
        objects.append(b"<< /Title (%s) >>" % title.encode("latin-1"))
        info = b" /Info %d 0 R" % len(objects)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (len(objects) + 1, info)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def encrypt_pdf(pdf: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    # RC4 needs no crypto library; AES would need pypdf[crypto].
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(title: str | None = "Staff handbook") -> bytes:
    document = docx.Document()
    if title is not None:
        document.core_properties.title = title
    document.add_heading("Refunds", level=1)
    document.add_paragraph("Refunds are paid within five days.")
    document.add_heading("Fees", level=2)
    document.add_paragraph("Cards are free", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Plan"
    table.cell(0, 1).text = "Price | EUR"
    table.cell(1, 0).text = "Basic"
    table.cell(1, 1).text = "10"
    document.add_paragraph("   ")
    document.add_paragraph("After the table.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_zip(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


# -- PDF -----------------------------------------------------------------------------------


def test_a_pdf_yields_its_pages_text_and_metadata_title() -> None:
    pdf = make_pdf([["Refund policy", "Refunds within five days."], ["Page two"]], "Handbook")

    result = run(pdf, "application/pdf", "handbook.pdf")

    assert result == Extracted(
        "Refund policy\nRefunds within five days.\n\nPage two", "Handbook", PDF
    )


def test_the_pdf_magic_wins_over_a_declared_type_and_extension() -> None:
    result = run(make_pdf([["Hello"]]), "text/plain", "notes.txt")

    assert (result.text, result.title, result.detected_type) == ("Hello", None, PDF)


def test_a_declared_pdf_may_start_with_junk_as_acrobat_allows() -> None:
    result = run(b"\r\n junk header\n" + make_pdf([["Hello"]]), "application/pdf")

    assert (result.text, result.detected_type) == ("Hello", PDF)


def test_a_pdf_without_a_text_layer_has_no_extractable_text() -> None:
    reason = failure(make_pdf([[]]), "application/pdf")

    assert reason == NO_PDF_TEXT == "no extractable text (scanned PDF? OCR found nothing)"


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_a_truncated_pdf_is_unreadable(keep: float) -> None:
    pdf = make_pdf([["Refund policy"]] * 3)

    assert failure(pdf[: int(len(pdf) * keep)], "application/pdf") == UNREADABLE


def test_a_pdf_with_a_broken_structure_is_unreadable() -> None:
    assert failure(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >> junk\n%%EOF\n") == UNREADABLE


def test_a_password_protected_pdf_is_unreadable() -> None:
    pdf = encrypt_pdf(make_pdf([["Secret"]]), user_password="secret")

    reason = failure(pdf, "application/pdf")

    assert reason == PASSWORD_PROTECTED
    assert reason.startswith("truncated or unreadable file")


def test_a_pdf_encrypted_with_an_empty_user_password_is_read() -> None:
    pdf = encrypt_pdf(make_pdf([["Restricted but open"]], "Open"), user_password="")

    assert run(pdf) == Extracted("Restricted but open", "Open", PDF)


def test_bytes_that_contradict_a_declared_pdf_are_unsupported() -> None:
    assert failure(PNG, "application/pdf", "scan.pdf") == UNSUPPORTED
    assert failure(PNG, None, "scan.pdf") == UNSUPPORTED
    assert failure(b"just text", "application/pdf") == UNSUPPORTED


# -- DOCX ----------------------------------------------------------------------------------


def test_a_docx_becomes_markdown_with_headings_lists_and_tables() -> None:
    result = run(make_docx(), None, "handbook.docx")

    assert result.title == "Staff handbook"
    assert result.detected_type == DOCX
    assert result.text == (
        "# Refunds\n\n"
        "Refunds are paid within five days.\n\n"
        "## Fees\n\n"
        "- Cards are free\n\n"
        "| Plan | Price \\| EUR |\n"
        "| --- | --- |\n"
        "| Basic | 10 |\n\n"
        "After the table."
    )


def test_a_docx_without_a_title_property_is_titled_by_its_first_heading() -> None:
    assert run(make_docx(title=None)).title == "Refunds"


def test_a_truncated_docx_is_unreadable() -> None:
    data = make_docx()

    assert failure(data[: len(data) // 2]) == UNREADABLE
    assert failure(data[:100], None, "handbook.docx") == UNREADABLE


def test_zips_that_are_not_word_documents_are_unsupported() -> None:
    assert failure(make_zip({"notes.txt": "hello"}), "application/zip") == UNSUPPORTED
    assert failure(make_zip({"a.txt": "hello"}), None, "a.docx") == UNSUPPORTED
    macro_enabled = {
        "[Content_Types].xml": "application/vnd.ms-word.document.macroEnabled.main+xml",
        "word/document.xml": "<w:document/>",
    }
    assert failure(make_zip(macro_enabled)) == UNSUPPORTED


def test_text_declared_as_docx_is_unsupported() -> None:
    assert failure(b"plain words", DOCX) == UNSUPPORTED


# -- HTML ----------------------------------------------------------------------------------


def test_html_becomes_markdown_without_scripts_or_styles() -> None:
    html = (
        b"<!DOCTYPE html><html><head><title> Help  centre </title>"
        b"<style>body { color: red }</style><script>alert('boo')</script></head>"
        b"<body><h1>Refunds</h1><p>Paid in <b>five</b> days.</p></body></html>"
    )

    result = run(html, "text/html; charset=utf-8")

    assert result == Extracted("# Refunds\n\nPaid in **five** days.", "Help centre", HTML)


def test_html_is_recognised_without_a_type_and_decoded_by_its_meta_charset() -> None:
    html = (
        "<html><head><meta charset='windows-1252'><title>Café</title></head>"
        "<body><p>crème “brûlée”</p></body></html>"
    ).encode("cp1252")

    assert run(html) == Extracted("crème “brûlée”", "Café", HTML)


# -- text and markdown ---------------------------------------------------------------------


def test_markdown_keeps_its_text_and_takes_its_first_heading_as_title() -> None:
    result = run(b"Intro\n\n# Billing  guide\n\nPay monthly.\n", None, "guide.md")

    assert result == Extracted(
        "Intro\n\n# Billing  guide\n\nPay monthly.", "Billing guide", MARKDOWN
    )


def test_a_utf8_bom_is_dropped() -> None:
    result = run("Naïve café".encode("utf-8-sig"), "text/plain")

    assert (result.text, result.detected_type) == ("Naïve café", TEXT)


def test_utf16_with_a_bom_is_decoded() -> None:
    assert run("Grüße aus München".encode("utf-16")).text == "Grüße aus München"


def test_cp1252_text_keeps_its_accents_and_punctuation() -> None:
    assert run(FRENCH.encode("cp1252"), "text/plain", "menu.txt").text == FRENCH.strip()


def test_latin1_text_is_decoded() -> None:
    text = "Résumé of the naïve façade: déjà vu, señor. Größe und Maße sind gleich geblieben."

    assert run(text.encode("latin-1")).text == text


def test_shift_jis_text_is_decoded() -> None:
    assert run(JAPANESE.encode("shift_jis"), None, "faq.txt").text == JAPANESE.strip()


def test_a_declared_charset_is_used_when_the_bytes_are_not_utf8() -> None:
    greek = "Καλημέρα κόσμε"

    assert run(greek.encode("iso-8859-7"), "text/plain; charset=ISO-8859-7").text == greek


def test_a_legacy_encoding_far_into_a_large_file_is_detected() -> None:
    text = "plain ascii line\n" * 20_000 + FRENCH

    assert run(text.encode("cp1252")).text == text.strip()


def test_whitespace_is_normalised() -> None:
    data = b"  Title  \r\n\r\n\r\n\r\nBody\tline\t \n\n\n\nEnd   \n\n"

    assert run(data).text == "Title\n\nBody\tline\n\nEnd"


def test_whitespace_only_text_has_no_extractable_text() -> None:
    assert failure(b" \r\n\t\n\n ", "text/plain") == NO_TEXT
    assert failure(b"<html><body><script>x()</script></body></html>", "text/html") == NO_TEXT


# -- refusals ------------------------------------------------------------------------------


def test_a_zero_byte_file_is_refused() -> None:
    assert failure(b"", "application/pdf", "empty.pdf") == ZERO_BYTES


def test_content_over_the_limit_is_refused() -> None:
    assert failure(b"a" * (MAX_BYTES + 1), "text/plain") == "content over 10 MB"
    with pytest.raises(ExtractionFailed, match=r"^content over 100 bytes$"):
        run(b"a" * 101, max_bytes=100)


def test_text_that_unpacks_over_the_limit_is_refused() -> None:
    document = docx.Document()
    document.add_paragraph("Refunds are paid within five days. " * 3000)
    out = io.BytesIO()
    document.save(out)

    with pytest.raises(ExtractionFailed, match=r"^content over 65536 bytes$"):
        run(out.getvalue(), max_bytes=64 * 1024)


def test_binary_content_is_unsupported() -> None:
    assert failure(PNG) == UNSUPPORTED
    assert failure(b"text\x00with\x00nuls\x00" * 50, "text/plain", "a.txt") == UNSUPPORTED
    assert failure(bytes(range(1, 256)) * 20) == UNSUPPORTED


def test_declared_types_other_than_documents_are_unsupported() -> None:
    assert failure(b"looks like text", "image/png", "photo.png") == UNSUPPORTED
    assert failure(b"looks like text", "application/zip") == UNSUPPORTED


def test_a_generic_declared_type_falls_back_to_the_extension() -> None:
    result = run(b"# Notes\n", "application/octet-stream", "notes.md")

    assert (result.detected_type, result.title) == (MARKDOWN, "Notes")


def test_extraction_failures_are_never_retried() -> None:
    assert issubclass(ExtractionFailed, Unrecoverable)
    assert str(ExtractionFailed(UNSUPPORTED)) == "unsupported content type"


def test_docx_style_names_are_python_docx_s_own_each_looked_up_once() -> None:
    document = docx.Document()
    document.add_paragraph("Plain, default style")
    document.add_heading("Chapter", level=1)
    document.add_heading("Section", level=3)
    document.add_paragraph("Point", style="List Bullet")
    document.add_paragraph("Step", style="List Number")
    document.add_paragraph("Quoted", style="Quote")
    document.add_paragraph("Another plain one")
    unknown = document.add_paragraph("Style id the document does not define")
    unknown._p.style = "NoSuchStyle"
    styles = _StyleNames(document)
    looked_up = 0
    get_style = document.part.get_style

    def counting(style_id: str | None, style_type: object) -> object:
        nonlocal looked_up
        looked_up += 1
        return get_style(style_id, style_type)

    document.part.get_style = counting
    names = [styles.of(paragraph) for paragraph in document.paragraphs]
    document.part.get_style = get_style
    # The same names python-docx gives, the default's and an unknown id's included
    assert names == [paragraph.style.name for paragraph in document.paragraphs]
    assert names[0] == names[-2] == names[-1] == "Normal"
    # One lookup per distinct style id, however many paragraphs share it
    assert looked_up == len({paragraph._p.style for paragraph in document.paragraphs})

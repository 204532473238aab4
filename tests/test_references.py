"""The bibliography is the single checked source of citations.

docs/references.bib holds one entry per paper. These tests parse it, check each
entry, and check that every arXiv id cited anywhere in docs/ or snippets/ has an
entry, with the year written next to the citation equal to the entry's year.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIB = ROOT / "docs" / "references.bib"
PAGE = ROOT / "docs" / "references.md"

ARXIV_ID = re.compile(r"^\d{4}\.\d{4,5}$")
# "arXiv:1706.03762", "arXiv 1706.03762", "arxiv.org/abs/1706.03762" (also pdf/, with a version)
CITED = re.compile(r"(?:arXiv[:\s]\s*|arxiv\.org/(?:abs|pdf)/)(\d{4}\.\d{4,5})(?:v\d+)?", re.I)
YEAR = re.compile(r"(?<![\d.])(19[5-9]\d|20[0-2]\d)(?![\d.])")


def parse_bib(text: str) -> dict[str, dict[str, str]]:
    """A small BibTeX reader: @type{key, field = {value} or "value" or number, ...}."""
    entries: dict[str, dict[str, str]] = {}
    for match in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        kind, key = match.group(1).lower(), match.group(2)
        i, depth = match.end(), 1
        while depth:  # find the brace that closes the entry
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[match.end() : i - 1]
        fields: dict[str, str] = {"ENTRYTYPE": kind}
        j = 0
        field = re.compile(r"\s*(\w+)\s*=\s*")
        while True:
            f = field.match(body, j)
            if not f:
                break
            name, j = f.group(1).lower(), f.end()
            if body[j] == "{":
                depth, start = 1, j + 1
                j += 1
                while depth:
                    depth += {"{": 1, "}": -1}.get(body[j], 0)
                    j += 1
                value = body[start : j - 1]
            elif body[j] == '"':
                end = body.index('"', j + 1)
                value, j = body[j + 1 : end], end + 1
            else:
                v = re.match(r"[\w.-]+", body[j:])
                value, j = v.group(0), j + v.end()
            fields[name] = " ".join(value.split())
            j = body.find(",", j) + 1 if body.find(",", j) != -1 else len(body)
        assert key not in entries, f"duplicate BibTeX key {key}"
        entries[key] = fields
    return entries


ENTRIES = parse_bib(BIB.read_text(encoding="utf-8"))
BY_ARXIV = {e["eprint"]: (key, e) for key, e in ENTRIES.items() if "eprint" in e}


def cited_files() -> list[Path]:
    files = [p for p in (ROOT / "docs").rglob("*") if p.suffix in {".md", ".py", ".ipynb"}]
    files += list((ROOT / "snippets").rglob("*.py"))
    return sorted(p for p in files if ".cache" not in p.parts)


def citations() -> list[tuple[str, str, set[str]]]:
    """(file, arXiv id, years written just before it) for every citation in docs/ and snippets/."""
    found = []
    for path in cited_files():
        text = path.read_text(encoding="utf-8")
        previous_end = 0
        for m in CITED.finditer(text):
            # the citation's own text: back to a blank line or the previous id, at most 300 characters
            start = max(previous_end, m.start() - 300, text.rfind("\n\n", 0, m.start()) + 1)
            found.append((str(path.relative_to(ROOT)), m.group(1), set(YEAR.findall(text[start : m.start()]))))
            previous_end = m.end()
    return found


def test_parser_reads_a_known_entry():
    entry = ENTRIES["vaswani2017attention"]
    assert entry["title"] == "Attention Is All You Need"
    assert entry["eprint"] == "1706.03762" and entry["year"] == "2017"
    assert len(ENTRIES) >= 30


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_every_entry_is_complete(key):
    entry = ENTRIES[key]
    for field in ("author", "title", "year"):
        assert entry.get(field), f"{key} has no {field}"
    assert re.fullmatch(r"(19|20)\d\d", entry["year"]), f"{key}: year {entry['year']!r}"
    if "eprint" in entry:
        assert entry.get("archiveprefix") == "arXiv", f"{key}: eprint without archivePrefix = {{arXiv}}"
        assert ARXIV_ID.match(entry["eprint"]), f"{key}: arXiv id {entry['eprint']!r} is not YYMM.NNNNN"
        yymm = entry["eprint"][:4]
        assert 1 <= int(yymm[2:]) <= 12, f"{key}: month {yymm[2:]} in {entry['eprint']}"
        assert len(entry["eprint"]) == (9 if yymm < "1501" else 10), f"{key}: 4 digits before 2015-01, 5 after"
        # the guide dates an arXiv paper by its first version, whose year is 20YY
        assert entry["year"] == "20" + yymm[:2], f"{key}: year {entry['year']} but arXiv:{entry['eprint']}"
    else:
        assert entry["ENTRYTYPE"] in {"article", "techreport", "book", "inproceedings"}, key


def test_citations_found():
    ids = {cited for _, cited, _ in citations()}
    assert "1409.0473" in ids and "1706.03762" in ids  # the scan itself works


@pytest.mark.parametrize("where,arxiv_id,years", citations(), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_every_cited_arxiv_id_is_in_the_bibliography(where, arxiv_id, years):
    assert arxiv_id in BY_ARXIV, f"{where} cites arXiv:{arxiv_id}, which docs/references.bib lacks"
    key, entry = BY_ARXIV[arxiv_id]
    if years:
        assert entry["year"] in years, (
            f"{where} cites arXiv:{arxiv_id} with year(s) {sorted(years)}, "
            f"but references.bib ({key}) says {entry['year']}"
        )


def test_references_page_lists_every_entry_and_links_the_bib():
    page = PAGE.read_text(encoding="utf-8")
    assert "(references.bib)" in page
    for key, entry in ENTRIES.items():
        if "eprint" in entry:
            assert f"https://arxiv.org/abs/{entry['eprint']}" in page, f"references.md lacks {key}"
        else:
            assert entry["title"].replace("{", "").replace("}", "") in page, f"references.md lacks {key}"


def test_bibtex_blocks_on_the_page_match_the_file():
    """The page shows each entry's BibTeX; it must be the file's text, not a drifted copy."""
    page = PAGE.read_text(encoding="utf-8")
    text = BIB.read_text(encoding="utf-8")
    for raw in re.findall(r"^@\w+\{.*?^\}$", text, re.S | re.M):
        indented = "\n".join("        " + line for line in raw.split("\n"))
        assert indented in page, f"references.md does not show this entry verbatim:\n{raw}"

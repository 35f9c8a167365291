"""A generated block of the README between two marker lines: the benchmark (`bench.run`) and
the cache benchmark (`bench.cache`) each keep one, regenerated from a committed results
directory, and their tests read back which directory it came from."""

from __future__ import annotations

import re
from pathlib import Path


class MarkedBlock:
    def __init__(self, start: str, end: str, what: str) -> None:
        self.what = what  # names the block in the error for a README without its markers
        self._re = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)

    def replace(self, readme: Path, block: str) -> None:
        """Put `block` (markers included) where the README's block stands."""
        text = readme.read_text()
        if not self._re.search(text):
            raise SystemExit(f"{readme}: no {self.what} block (add the two marker lines first)")
        readme.write_text(self._re.sub(lambda _: block, text, count=1))

    def source(self, readme: Path, link: str) -> str | None:
        """The results directory the block was generated from: group 1 of `link` in it."""
        found = self._re.search(readme.read_text())
        if not found:
            return None
        match = re.search(link, found.group(0))
        return match.group(1) if match else None

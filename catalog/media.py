"""A model's worst-case media costs, as the catalog states them. Pure (no Django).

Sources (Anthropic's documentation):
- https://platform.claude.com/docs/en/build-with-claude/vision: the maximal native image
  resolution per model caps the tokens of one image: 4,784 tokens (2,576 px on the long edge)
  for Claude Opus 4.7 and the high-resolution models after it, 1,568 tokens (1,568 px) for the
  others.
- https://platform.claude.com/docs/en/build-with-claude/pdf-support: each PDF page is billed as
  an image plus its extracted text (typically 1,500–3,000 tokens a page), and a request carries
  at most 600 pages (100 for models with a 200k-token context window).
"""

from __future__ import annotations

from dataclasses import dataclass

# The text part of a PDF page's bound: the top of the documented 1,500–3,000 tokens per page.
PDF_PAGE_TEXT_TOKENS = 3000


@dataclass(frozen=True, slots=True)
class MediaFigures:
    image_max_tokens: int  # one image after the provider's resize
    pdf_page_max_tokens: int  # one PDF page: its image plus its text
    pdf_max_pages: int  # pages one request may carry; more is refused upstream (never billed)

    def as_public(self) -> dict[str, int]:
        return {
            "imageMaxTokens": self.image_max_tokens,
            "pdfPageMaxTokens": self.pdf_page_max_tokens,
            "pdfMaxPages": self.pdf_max_pages,
        }


# A model with no figures of its own (added by hand) is held at the largest documented ones.
CONSERVATIVE_FIGURES = MediaFigures(
    image_max_tokens=4784, pdf_page_max_tokens=4784 + PDF_PAGE_TEXT_TOKENS, pdf_max_pages=600
)

"""A bisect's report: what every format says (common), the terminal text and log (text), markdown for
an issue (markdown), JSON and the report files (render), and progress lines while it runs (progress)."""

"""The bisect: candidate lists (plan), one search phase (phase) of verdicts (judge), walking back
(widen), the driver over phases (driver), the result (assemble, boundary), and the real wiring (job).
Measuring is behind the seam (seam): the real measurer or a fake."""

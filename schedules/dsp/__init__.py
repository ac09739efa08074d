"""DSP schedule rules, in priority order."""
from ..llvm import RULES  # noqa: F401  (until the DSP's own rules land)

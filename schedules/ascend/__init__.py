"""Ascend schedule rules: none yet (lowering.ascend lowers the TE definitions directly)."""
RULES = ()

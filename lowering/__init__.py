"""Lowering: TE definition + schedule rule + target record -> compiled artifact."""

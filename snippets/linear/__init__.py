"""Beyond dense softmax: gated and delta-rule linear attention, state-space duality,
sparse attention and hybrids."""

"""Tag grammars (parallel_r1, npr, parathinker): parse/validate, metrics and structured-attention layouts. Imports no torch at module load."""

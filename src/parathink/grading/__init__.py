"""Answer extraction (last \\boxed{}, else a 'Final Answer:' line) and equivalence through math-verify."""

"""Tokenizer, model factory, tag tokens and structured attention."""

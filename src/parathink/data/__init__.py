"""Problem sources (one record schema), the synthetic arithmetic domain and prompt templates."""

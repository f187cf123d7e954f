"""Rollout generation with a KV cache: causal and forked (structured) modes."""

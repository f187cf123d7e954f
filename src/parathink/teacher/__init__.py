"""Teacher backends that write raw parallel traces (scripted, self, hf, openai, vllm)."""

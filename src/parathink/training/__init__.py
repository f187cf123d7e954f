"""Training loops: cold-start SFT and the GRPO family."""

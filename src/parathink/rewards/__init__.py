"""Reward functions and schedules of DESIGN.md, a registry chosen by name."""

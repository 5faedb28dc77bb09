"""The screen runner: drives a vLLM-Omni server through the A/B protocol and writes receipts.
Never imports ``bot``."""

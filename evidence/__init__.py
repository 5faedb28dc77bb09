"""Pure evidence domain of campaign-bot: bundle models, manifests and integrity verification,
verdicts, findings and media gates.  No network I/O, no GitHub knowledge (DESIGN.md)."""

__version__ = "0.1.0"

"""Pure evidence domain of campaign-bot: bundle models, manifests and integrity verification,
verdicts, findings and media gates.  No network I/O, no GitHub knowledge."""

__version__ = "0.1.0"

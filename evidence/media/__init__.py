"""Media gates: decode generated MP4s with PyAV and judge control against candidate."""

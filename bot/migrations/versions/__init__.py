"""Migration revisions, one file each, chained by ``down_revision``."""

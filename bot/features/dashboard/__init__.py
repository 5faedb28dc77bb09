"""The campaign dashboard: what a campaign's evidence says, as pages people look at.

- :mod:`.model`: the data model (:class:`~.model.Site`), built from a campaign directory by
  the same evidence pipeline as ``campaign-bot check``, plus the bot's budget ledger;
- :mod:`.ledger`: reads the bot's ``budget_entries`` and ``screens`` tables (read-only);
- :mod:`.charts`: server-side SVG charts (pygal), accessible and countable;
- :mod:`.pages`: model -> HTML string per page, and the static-site writer;
- :mod:`.cli`: ``campaign-bot report DIR --out SITE [--database URL]``.

Depends on ``evidence`` (and SQLAlchemy for the ledger), never on another bot feature.  The
charting library (pygal) is a base dependency: ``serve`` draws the same charts on its live
pages, so the base install must have it.
"""

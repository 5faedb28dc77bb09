"""Alembic migrations of the bot database (run by ``bot.store.migrate``)."""

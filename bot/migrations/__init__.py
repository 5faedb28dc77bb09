"""Alembic migrations of the bot database (run by ``bot.database.migrate``)."""

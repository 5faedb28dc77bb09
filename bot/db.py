"""Declarative base for the screen tables (replaced by ``bot.store``'s base on integration)."""

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    """SQLAlchemy declarative base."""

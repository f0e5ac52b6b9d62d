"""The declarative base every table shares (its constraint naming convention) and the status vocabularies
that CHECK constraints spell out."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    DateTime,
    MetaData,
    func,
)
from sqlalchemy.orm import DeclarativeBase, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

STATUSES = ("queued", "in_progress", "completed", "failed", "cancelled", "waiting_approval")
PIPELINE_STATUSES = ("running", "waiting_approval", "completed", "failed", "cancelled")


def in_list(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def now_column() -> Any:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())

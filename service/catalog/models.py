"""ORM tables. Datasheet units stay in the column names; money is integer micro-USD."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Date, Float, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Accelerator(Base):
    """One accelerator's datasheet facts, each row with its source and date."""

    __tablename__ = "accelerators"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    vendor: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    memory_gib: Mapped[float] = mapped_column(Float)
    hbm_tbytes_per_s: Mapped[float] = mapped_column(Float)
    fp32_tflops: Mapped[float | None] = mapped_column(Float)
    tf32_tflops: Mapped[float | None] = mapped_column(Float)
    bf16_tflops: Mapped[float | None] = mapped_column(Float)
    fp16_tflops: Mapped[float | None] = mapped_column(Float)
    fp8_tflops: Mapped[float | None] = mapped_column(Float)
    tdp_w: Mapped[float] = mapped_column(Float)
    scaleup_domain_size: Mapped[int] = mapped_column(Integer)
    scaleup_gbytes_per_s: Mapped[float] = mapped_column(Float)
    scaleout_gbits_per_s: Mapped[float] = mapped_column(Float)
    purchase_price_usd_micros: Mapped[int | None] = mapped_column(BigInteger)
    price_basis: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    as_of: Mapped[dt.date] = mapped_column(Date)
    notes: Mapped[str] = mapped_column(Text, default="")

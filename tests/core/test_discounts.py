"""Discount books in the core: which entry applies, and the net price it gives."""

from __future__ import annotations

from decimal import Decimal

from service.core.discounts import DiscountBook, DiscountEntry, apply_book, best_entry
from service.core.quote import Term
from tests.core.test_quote import TODAY, offer

ALWAYS = {"valid_from_day": TODAY - 365, "valid_until_day": TODAY + 365}


def entry(**kwargs: object) -> DiscountEntry:
    return DiscountEntry(**{"provider": "aws", **ALWAYS, **kwargs})  # type: ignore[arg-type]


def test_the_most_specific_entry_wins() -> None:
    general = entry(percent_off=Decimal("10"))
    specific = entry(percent_off=Decimal("20"), region="us-east-1", term="on_demand")
    assert best_entry([general, specific], offer(), TODAY) is specific
    assert best_entry([general, specific], offer(region="us-west-2"), TODAY) is general


def test_equally_specific_entries_give_the_higher_net_price() -> None:
    """An ambiguous book never makes a commitment look smaller than one of its readings."""
    by_term = entry(percent_off=Decimal("10"), term="on_demand")
    by_accelerator = entry(percent_off=Decimal("20"), accelerator="h100")
    assert best_entry([by_term, by_accelerator], offer(), TODAY) is by_term
    assert best_entry([by_accelerator, by_term], offer(), TODAY) is by_term


def test_the_validity_window_is_inclusive_at_both_ends() -> None:
    window = entry(percent_off=Decimal("10"), valid_from_day=TODAY, valid_until_day=TODAY + 1)
    assert best_entry([window], offer(), TODAY) is window
    assert best_entry([window], offer(), TODAY + 1) is window
    assert best_entry([window], offer(), TODAY - 1) is None
    assert best_entry([window], offer(), TODAY + 2) is None


def test_net_prices_are_exact_and_keep_the_list_price() -> None:
    book = DiscountBook(name="acme", revision=3, entries=(
        entry(percent_off=Decimal("18")),
        entry(provider="lambda", price_per_gpu_hour=Decimal("2.10"), currency="USD"),
        entry(provider="gcp", price_per_gpu_hour=Decimal("2.10"), currency="EUR"),
    ))
    aws, lam, gcp, other = apply_book(book, [
        offer(), offer(provider="lambda"), offer(provider="gcp"), offer(provider="nebius")],
        TODAY)
    assert aws.price_per_instance_hour == Decimal("65.600000")  # 80.00 x 0.82
    assert aws.list_price_per_instance_hour == Decimal("80.00")
    assert aws.discount == "discount book acme@3: 18% off (aws)"
    assert lam.price_per_instance_hour == Decimal("16.800000")  # 2.10 x 8 GPUs
    # A fixed rate in another currency does not apply to a USD offer.
    assert gcp.list_price_per_instance_hour is None
    assert gcp.price_per_instance_hour == Decimal("80.00")
    assert other.discount is None


def test_percent_rounding_is_half_even_to_the_micro() -> None:
    one = entry(percent_off=Decimal("33.3333"))
    net = one.net(offer(price_per_instance_hour=Decimal("0.000003"), term=Term.SPOT))
    assert net == Decimal("0.000002")  # 0.000002000001 -> 0.000002

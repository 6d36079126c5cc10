"""Units and physical constants. Every conversion in the project happens with these names.

Sources: SI (BIPM, 9th edition, 2019) for the decimal prefixes; IEC 80000-13 for the binary
prefixes (GiB). Vendor datasheets quote memory in GB (NVIDIA: HBM capacity is printed in GB but
is a binary quantity for H100/A100: "80GB" = 80 GiB), bandwidth in decimal TB/s and GB/s, and
networks in decimal Gbit/s.
"""

from typing import Final

KIB_BYTES: Final = 1024
MIB_BYTES: Final = 1024**2
GIB_BYTES: Final = 1024**3
GB_BYTES: Final = 10**9
TB_BYTES: Final = 10**12

TERA: Final = 1e12
GIGA: Final = 1e9
BITS_PER_BYTE: Final = 8

SECONDS_PER_HOUR: Final = 3600.0
SECONDS_PER_DAY: Final = 86_400.0
HOURS_PER_YEAR: Final = 365 * 24
"""8,760: the year of reserved terms and depreciation (AWS computes an effective reserved rate
as hourly + up-front / (years x 8,760)). The one definition; an int, so that it stays exact in
``Decimal`` arithmetic."""
JOULES_PER_KWH: Final = 3.6e6
GRAMS_PER_KG: Final = 1000.0


def gib_to_bytes(gib: float) -> float:
    """Convert GiB (2**30 bytes) to bytes."""
    return gib * GIB_BYTES


def bytes_to_gib(num_bytes: float) -> float:
    """Convert bytes to GiB (2**30 bytes)."""
    return num_bytes / GIB_BYTES


def tflops_to_flops_per_s(tflops: float) -> float:
    """Convert TFLOP/s (10**12) to FLOP/s."""
    return tflops * TERA


def tbytes_per_s_to_bytes_per_s(tbytes_per_s: float) -> float:
    """Convert decimal TB/s to bytes/s."""
    return tbytes_per_s * TB_BYTES


def gbytes_per_s_to_bytes_per_s(gbytes_per_s: float) -> float:
    """Convert decimal GB/s to bytes/s."""
    return gbytes_per_s * GB_BYTES


def gbits_per_s_to_bytes_per_s(gbits_per_s: float) -> float:
    """Convert decimal Gbit/s to bytes/s."""
    return gbits_per_s * GIGA / BITS_PER_BYTE

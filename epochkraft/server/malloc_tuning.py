"""glibc's allocator told to keep the memory of the broker's log reads for the next ones.

A Fetch reads each partition's records with one ``pread`` into a new buffer of up to
``max.partition.fetch.bytes`` (1 MiB by default) that lives until the response is written. With glibc's
defaults such a buffer is either a fresh mapping or heap memory that ``free`` hands back to the kernel
(the top of the heap is trimmed beyond 128 KiB, or twice the raised mapping threshold), so every read
page-faults its pages in again: 150,000 minor faults per GB served, measured on a broker under Kafka's
ConsumerPerformance, about 15 with these thresholds. Allocations below ``MMAP_THRESHOLD`` come from the
heap, and up to ``TRIM_THRESHOLD`` of free memory at its top stays mapped for the next read: ``os.pread``
of 1 MiB pairs from the page cache costs 0.19 CPU seconds per GB instead of 0.35, and the brokers' CPU
per GB served fell by a quarter (docs/benchmarks.md, consumers from the page cache). glibc's own
thresholds rise only after a larger buffer is freed. Other C libraries (musl) are left as they are.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20  # above a Fetch's largest partition read at the default max.partition.fetch.bytes
TRIM_THRESHOLD = 64 << 20  # free memory kept at the top of the heap


def keep_read_buffers() -> bool:
    """Sets the two thresholds; False where the C library is not glibc (nothing changed)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the symbols already loaded: glibc's mallopt among them
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )

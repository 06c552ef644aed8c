"""The broker's allocator keeps the memory of its log reads: reading 1 MiB pairs of a segment, as a Fetch
of two partitions does, again and again, page-faults no new memory in after the first pass."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path

import pytest

from epochkraft.server.malloc_tuning import keep_read_buffers

MIB = 1 << 20


def _read_in_pairs(fd: int, size: int) -> None:
    """Two partitions a response, the last response still being written while the next is read."""
    in_flight: list[bytes] = []
    for position in range(0, size, 2 * MIB):
        in_flight = [os.pread(fd, MIB, position), os.pread(fd, MIB, position + MIB)]
    assert sum(map(len, in_flight)) == 2 * MIB


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_reads_of_a_mebibyte_reuse_freed_memory(tmp_path: Path) -> None:
    assert keep_read_buffers()
    segment = tmp_path / "00000000000000000000.log"
    with open(segment, "wb") as f:  # no 16 MiB buffer: freeing one raises glibc's own thresholds
        for _ in range(16):
            f.write(os.urandom(MIB))
    fd = os.open(segment, os.O_RDONLY)
    try:
        _read_in_pairs(fd, 16 * MIB)  # the heap grows once
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(4):
            _read_in_pairs(fd, 16 * MIB)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    finally:
        os.close(fd)
    # 64 MiB read: 16,384 pages, each faulted in again when freed memory goes back to the kernel
    assert faults < 1000

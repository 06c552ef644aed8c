"""Validation of produced batches off the event loop.

Kafka validates produced records on its request handler threads (LogValidator, called from
UnifiedLog.append), never on the network threads. Here the event loop is the network thread: a batch
whose validation costs more than a few hundred microseconds (a compressed batch is inflated and every
record parsed: up to 16 MiB and about 2 million records, some 0.5 s) is validated on a small pool of
worker threads, so that other connections keep being served meanwhile. The work holds the GIL
(measured: cramjam 2.14 inflates zstd, gzip and lz4 without releasing it, one call up to 12-30 ms at the
16 MiB bound), so the loop waits for the GIL's switch interval (1 ms in the broker) between its turns,
or for one inflate call at most, instead of for the whole batch. The records' C walk lets go of the GIL
for batches of many records; aiokafka's Cython reader, which answers the batches the walk does not pass,
holds it for each record.

The pool bounds the work in progress: at most ``threads`` batches are inflated at once (each into at most
16 MiB), the others wait their turn in its queue holding only their request bytes, which the
connection limits and the per-connection in-flight limit already bound.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from epochkraft.protocol.records import BatchHeader, RecordRules, validate

# Uncompressed batches of up to this many records are validated on the loop: walking them costs about
# 0.02 us a record (0.2 us where the Cython reader answers, so under 1 ms here) and CRC-32C about 0.1 ms a
# MB, while handing a batch to a thread costs about 0.1 ms of CPU and GIL hand-overs. A record count is known before parsing (and a batch that declares
# fewer records than it holds is refused once that many are parsed), so it bounds the work.
INLINE_MAX_RECORDS = 4096


def validate_batches(records: bytes, headers: list[tuple[int, BatchHeader]], rules: RecordRules) -> None:
    for pos, header in headers:
        validate(records, pos, header, rules=rules)


def is_heavy(headers: list[tuple[int, BatchHeader]]) -> bool:
    """Batches worth a thread: compressed (inflating is not bounded by their size), or many records."""
    return any(h.attributes & 0x07 for _, h in headers) or (
        sum(h.record_count for _, h in headers) > INLINE_MAX_RECORDS
    )


class BatchValidator:
    """Validates produced batches on ``threads`` worker threads (0: on the event loop, as before the
    pool existed; kept to measure the difference)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="produce-validation")
            if threads > 0
            else None
        )

    async def validate(
        self, records: bytes, headers: list[tuple[int, BatchHeader]], rules: RecordRules
    ) -> None:
        """Returns once every batch passed; raises CorruptRecordError / InvalidRecordError otherwise."""
        if self._pool is None or not is_heavy(headers):
            validate_batches(records, headers, rules)
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, validate_batches, records, headers, rules)

    def close(self) -> None:
        """Stops the workers; a batch being validated finishes on its own, queued ones are dropped."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

"""Damaged stores: which array and chunk of a zarr store cannot be read, and the reads a failed open
left running.

A chunk whose bytes were damaged on disk fails deep in a codec (``Zstd decompression error``) with no
word of the store or the variable; a stage that fails that way is read again chunk by chunk, on the
failure path only, to name them. zarr reads a group's members side by side on its event loop: when
one member's metadata cannot be read, the others are left running, and at exit, once the thread
pools have shut down, each fails and is logged as an exception never retrieved.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
from pathlib import Path
from typing import Iterator

import zarr

__all__ = ["damaged_chunk", "naming_damage", "settle_reads"]

SETTLE_SECONDS = 30.0  # the longest wait for the reads a failed open left running


def damaged_chunk(path: str | os.PathLike) -> tuple[str, tuple[int, ...], tuple[int, int], str] | None:
    """The first chunk of the zarr v3 group at ``path`` that cannot be read (its arrays in name order,
    each chunk in order): (array name, chunk index, its rows [start, stop) along the first axis, the
    error as "Type: message"); None where every chunk reads, or the group itself does not open (its
    opener names that)."""
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3, use_consolidated=False)
        arrays = sorted(group.arrays())
    except Exception:  # noqa: BLE001 - the store's own opener says why it does not open
        return None
    for name, array in arrays:
        counts = [math.ceil(size / chunk) for size, chunk in zip(array.shape, array.chunks)]
        for index in itertools.product(*(range(count) for count in counts)):
            selection = tuple(slice(k * chunk, min((k + 1) * chunk, size))
                              for k, chunk, size in zip(index, array.chunks, array.shape))
            try:
                array[selection]
            except Exception as error:  # noqa: BLE001 - any failure to decode is the damage looked for
                rows = (selection[0].start, selection[0].stop) if selection else (0, 0)
                return name, index, rows, f"{type(error).__name__}: {error}"
    return None


@contextlib.contextmanager
def naming_damage(stores: dict[str, str | os.PathLike]) -> Iterator[None]:
    """Around work that reads the zarr stores ``stores`` ({kind, as errors name it ("data"): path}): an
    error other than a ``ValueError`` (bad input, named already) becomes a ``ValueError`` naming the
    store, array, chunk and rows that cannot be read, where one of the stores has such a chunk; any
    other error is raised as it is."""
    try:
        yield
    except (ValueError, KeyboardInterrupt):
        raise
    except Exception as error:
        for kind, path in stores.items():
            found = damaged_chunk(path)
            if found is not None:
                name, index, (start, stop), cause = found
                raise ValueError(
                    f"{kind} {Path(path)}: array {name!r}, chunk {index} (rows {start:,} to {stop - 1:,}) cannot be "
                    f"read ({cause}); the store is damaged: write it again") from error
        raise


def settle_reads() -> None:
    """Wait (at most ``SETTLE_SECONDS``) for the reads still running on zarr's event loop and take their
    results, errors included, so that none is left to fail at exit; for the failure path of an open."""
    from zarr.core.sync import sync

    async def settled() -> None:
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if others:
            await asyncio.gather(*others, return_exceptions=True)

    with contextlib.suppress(Exception):  # settling is best effort: the open's own error is what matters
        sync(settled(), timeout=SETTLE_SECONDS)

"""Named random streams: one run seed, an independent stream per purpose.

A study seeded with ``seed`` needs several random streams (the teacher's inputs, the student's
initialization, a calibration run's sampling...). Deriving them by hand as ``seed + 1``,
``seed + 2`` makes the replicates of a replication overlap: seed 0's second stream is seed 1's
first, so "ten seeds" are not ten independent draws. :func:`stream_seed` hashes the run seed and
the stream's name through :class:`numpy.random.SeedSequence` instead, so streams differ between
names and between run seeds.

Example:
    >>> stream_seed(0, "teacher inputs") == stream_seed(0, "teacher inputs")
    True
    >>> stream_seed(0, "calibration") == stream_seed(1, "calibration")
    False
"""

from __future__ import annotations

import zlib

import numpy as np

from workbench.errors import InputError


def stream_seed(seed: int, name: str) -> int:
    """A 63-bit seed for the stream ``name`` of a run seeded with ``seed``.

    Args:
        seed: The run's seed (a non-negative integer).
        name: What the stream draws (any non-empty text; the same name gives the same stream).

    Returns:
        An integer for ``torch.manual_seed``, ``torch.Generator.manual_seed``,
        ``np.random.default_rng`` or ``random.Random``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(name, str) or not name:
        raise InputError(f"a random stream needs a non-empty name, got {name!r}")
    sequence = np.random.SeedSequence(int(seed), spawn_key=(zlib.crc32(name.encode()),))
    return int(sequence.generate_state(1, np.uint64)[0] >> np.uint64(1))


def rng(seed: int, name: str) -> np.random.Generator:
    """A numpy generator on the stream ``name`` of ``seed`` (see :func:`stream_seed`)."""
    return np.random.default_rng(stream_seed(seed, name))

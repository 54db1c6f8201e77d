"""A minimal PNG encoder (8-bit RGB, zlib) so mask pictures need no imaging dependency."""

from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["encode_png"]


def encode_png(rgb: np.ndarray) -> bytes:
    """uint8 array (height, width, 3) -> PNG bytes."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError("expected a uint8 (height, width, 3) array")
    height, width = rgb.shape[:2]
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)],
                         axis=1)  # filter type 0 before every row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9)) + chunk(b"IEND", b""))

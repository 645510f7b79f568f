"""Optional lossy image codec for the episode store: one JPEG per frame chunk (imagecodecs).

A Zarr v3 array-to-bytes codec registered as ``robot_rl.jpeg``: chunks of shape (1, H, W, 3)
uint8 encode to one baseline JPEG each. Readers need robot_rl (or this codec) installed;
lossless stores need nothing beyond Zarr.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.core.buffer import Buffer, NDBuffer
from zarr.core.common import parse_named_configuration
from zarr.registry import register_codec

from robot_rl.errors import InputError

NAME = "robot_rl.jpeg"


@dataclass(frozen=True)
class JpegCodec(ArrayBytesCodec):
    is_fixed_size = False
    quality: int = 90

    def __init__(self, *, quality: int = 90) -> None:
        if not 1 <= int(quality) <= 100:
            raise InputError(f"JPEG quality must be in 1..100, got {quality}")
        object.__setattr__(self, "quality", int(quality))

    @classmethod
    def from_dict(cls, data: dict) -> "JpegCodec":
        _, config = parse_named_configuration(data, NAME, require_configuration=False)
        return cls(**(config or {}))

    def to_dict(self) -> dict:
        return {"name": NAME, "configuration": {"quality": self.quality}}

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec) -> Buffer:
        import imagecodecs

        frames = np.asarray(chunk_array.as_ndarray_like())
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[0] != 1 or frames.shape[-1] != 3:
            raise InputError(f"the JPEG codec takes (1, H, W, 3) uint8 chunks, got {frames.shape} {frames.dtype}")
        encoded = imagecodecs.jpeg_encode(np.ascontiguousarray(frames[0]), level=self.quality)
        return chunk_spec.prototype.buffer.from_bytes(bytes(encoded))

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec) -> NDBuffer:
        import imagecodecs

        image = imagecodecs.jpeg_decode(chunk_bytes.to_bytes())
        return chunk_spec.prototype.nd_buffer.from_ndarray_like(image.reshape(chunk_spec.shape))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec) -> Buffer:
        return self._encode_sync(chunk_array, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec) -> NDBuffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec) -> int:
        raise NotImplementedError("JPEG sizes depend on the content")


register_codec(NAME, JpegCodec)

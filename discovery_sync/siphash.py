"""SipHash in pure Python, as Rust's ``std::collections::hash_map::DefaultHasher`` computes it.

``DefaultHasher::new()`` is SipHash-1-3 (one compression round per 8-byte block, three
finalisation rounds) with both keys 0. Hashing a ``str`` in Rust writes its UTF-8 bytes and then
one ``0xFF`` byte, and ``Hasher::write`` is streaming, so the result is SipHash-1-3 of
``text.encode() + b"\\xff"``. See :func:`rust_str_hash`.

The algorithm (Aumasson & Bernstein, 2012): four 64-bit state words initialised from the key and
the constants "somepseudorandomlygeneratedbytes"; each little-endian 8-byte block ``m`` is mixed in
with ``v3 ^= m; c rounds; v0 ^= m``; the last block carries the message length (mod 256) in its top
byte; finalisation is ``v2 ^= 0xff; d rounds`` and the hash is ``v0 ^ v1 ^ v2 ^ v3``.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def siphash(data: bytes, k0: int = 0, k1: int = 0, *, c_rounds: int = 1, d_rounds: int = 3) -> int:
    """SipHash-c-d of ``data`` with the 128-bit key ``(k0, k1)`` (two u64); default SipHash-1-3."""
    v = [
        k0 ^ 0x736F6D6570736575,
        k1 ^ 0x646F72616E646F6D,
        k0 ^ 0x6C7967656E657261,
        k1 ^ 0x7465646279746573,
    ]

    def rounds(count: int) -> None:
        v0, v1, v2, v3 = v
        for _ in range(count):
            v0 = (v0 + v1) & _MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)
        v[:] = [v0, v1, v2, v3]

    def compress(block: int) -> None:
        v[3] ^= block
        rounds(c_rounds)
        v[0] ^= block

    tail = len(data) - len(data) % 8
    for offset in range(0, tail, 8):
        compress(int.from_bytes(data[offset : offset + 8], "little"))
    compress(((len(data) & 0xFF) << 56) | int.from_bytes(data[tail:], "little"))
    v[2] ^= 0xFF
    rounds(d_rounds)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def rust_str_hash(text: str) -> int:
    """What ``{ let mut h = DefaultHasher::new(); text.hash(&mut h); h.finish() }`` returns."""
    return siphash(text.encode("utf-8") + b"\xff")

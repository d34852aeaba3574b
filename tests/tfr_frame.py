"""tfr_frame.py - TFRecord framing for the tests' Python references: CRC-32C
(Castagnoli, reflected polynomial 0x82F63B78), TensorFlow's mask, frames.
Written from the format's facts (man/man5/tfrecord.5), apart from libdp, so
the references check libdp rather than repeat it.  One copy, imported by
tfr_ref.py, tfrshard.py and mkexamples.py."""
import struct

_T = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _T.append(_c)


def crc32c(b):
    c = 0xFFFFFFFF
    t = _T
    for x in b:
        c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mask(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    """One record: u64 length, masked CRC of the length, data, masked CRC of the data."""
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc32c(n))) + data + struct.pack("<I", mask(crc32c(data)))

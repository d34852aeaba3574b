#!/usr/bin/python3
"""tests/image_ref.py - the Pillow reference for tests/unit/image.c.

Writes to stdout, little endian: u32 n, then a 16x8 RGB JPEG of n bytes
(a colour ramp, quality 95, 4:2:0) made by Pillow; Pillow's decode of it
as RGB (8x16x3 bytes) and as L (8x16 bytes, Pillow's ITU-R 601-2 luma);
then Pillow's BILINEAR resize (antialiased, in float: mode "F") of the
RGB decode's red plane, the box (1.5, 0.5)-(14, 7.5) to 5x3, as 15
float32."""
import io
import sys

import numpy as np
from PIL import Image

y, x = np.mgrid[0:8, 0:16]
a = np.stack([x * 16, y * 32, 255 - x * 8 - y * 8], -1).astype(np.uint8)
b = io.BytesIO()
Image.fromarray(a).save(b, "JPEG", quality=95)
jpeg = b.getvalue()
im = Image.open(io.BytesIO(jpeg))
rgb = np.asarray(im.convert("RGB"))
gray = np.asarray(im.convert("L"))
red = Image.fromarray(rgb[..., 0].astype(np.float32), "F")
small = np.asarray(red.resize((5, 3), Image.BILINEAR, box=(1.5, 0.5, 14, 7.5)), dtype=np.float32)
out = sys.stdout.buffer
out.write(np.uint32(len(jpeg)).tobytes())
out.write(jpeg)
out.write(rgb.tobytes())
out.write(gray.tobytes())
out.write(small.tobytes())

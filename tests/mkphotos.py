# mkphotos.py DIR N: a folder of photos for the image examples and tests:
# DIR/cat and DIR/dog, N small JPEGs each (sizes and shades differing), as
# tfr-cat --encode images reads class folders.
import os
import sys
from PIL import Image

top, n = sys.argv[1], int(sys.argv[2])
for c, color in (("cat", (200, 120, 40)), ("dog", (40, 90, 200))):
    os.makedirs(f"{top}/{c}", exist_ok=True)
    for i in range(n):
        Image.new("RGB", (40 + i, 30), tuple(v - 10 * i for v in color)).save(f"{top}/{c}/{i}.jpg")

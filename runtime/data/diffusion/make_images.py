"""Writes tuner's bundled image set: coloured shapes with captions (deterministic).

Regenerate with: python runtime/data/diffusion/make_images.py

Three shapes x three colours (nine classes, the ``label`` field, for class-conditional
denoisers such as DiT), on light or dark backgrounds, at three aspect ratios (square,
landscape, portrait) so that aspect bucketing has something to do. ``captions.jsonl``
holds one ``{"file", "caption", "label"}`` row per image.
"""

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SHAPES = ["circle", "square", "triangle"]
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220)}
BACKGROUNDS = {"white": (245, 245, 245), "black": (15, 15, 15)}
SIZES = [(48, 48), (64, 48), (48, 64)]


def draw(shape: str, colour: tuple, bg: tuple, size: tuple, rng: random.Random) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, bg)
    d = ImageDraw.Draw(img)
    r = rng.randint(int(min(w, h) * 0.28), int(min(w, h) * 0.4))
    cx = rng.randint(r + 2, w - r - 2)
    cy = rng.randint(r + 2, h - r - 2)
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
    elif shape == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=colour)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    return img


def main() -> None:
    rng = random.Random(0)
    out = HERE / "images"
    out.mkdir(exist_ok=True)
    rows = []
    n = 0
    for rep in range(4):
        for si, shape in enumerate(SHAPES):
            for ci, (cname, colour) in enumerate(COLOURS.items()):
                bname = "white" if (rep + si + ci) % 2 == 0 else "black"
                size = SIZES[(rep + si) % len(SIZES)]
                img = draw(shape, colour, BACKGROUNDS[bname], size, rng)
                name = f"{n:03d}_{cname}_{shape}.png"
                img.save(out / name, optimize=True)
                rows.append({"file": f"images/{name}", "caption": f"a {cname} {shape} on a {bname} background",
                             "label": si * len(COLOURS) + ci})
                n += 1
    with open(HERE / "captions.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    print(f"{n} images")


if __name__ == "__main__":
    main()

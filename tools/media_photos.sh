#!/usr/bin/env bash
# Real photographs for `media_eval.py` beyond darknet's seven, from packages on the registries
# this project reaches: OpenCV's examples (Debian's `opencv-doc`), scikit-image's and
# matplotlib's sample data (their PyPI wheels), and the animal and object photographs of
# GCompris's activities (Debian's `gcompris-qt-data`, WebP pictures inside Qt resource files).
# Unpacked, not installed, into DIR:
#   bash tools/media_photos.sh DIR   →   DIR/opencv/…, DIR/skimage/…, DIR/matplotlib/…, DIR/gcompris/…
set -euo pipefail
out=$(realpath -m "${1:?usage: media_photos.sh DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
(cd "$work" && apt-get download opencv-doc >/dev/null 2>&1 && dpkg-deb -x opencv-doc_*.deb deb)
mkdir -p "$out/opencv"
cp -r "$work/deb/usr/share/doc/opencv-doc/examples/." "$out/opencv/"
python3 -m pip download --no-deps --only-binary=:all: -q -d "$work/wheels" \
  scikit-image==0.26.0 matplotlib==3.11.2
(cd "$work" && python3 -m zipfile -e wheels/scikit_image-*.whl sk >/dev/null \
  && python3 -m zipfile -e wheels/matplotlib-*.whl mpl >/dev/null)
mkdir -p "$out/skimage" "$out/matplotlib"
cp "$work"/sk/skimage/data/*.{png,jpg} "$out/skimage/"
cp "$work"/mpl/matplotlib/mpl-data/sample_data/*.{png,jpg} "$out/matplotlib/"
(cd "$work" && apt-get download gcompris-qt-data >/dev/null 2>&1 && dpkg-deb -x gcompris-qt-data_*.deb gc)
mkdir -p "$out/gcompris"
# Each WebP picture of an activity's resource file, in the order the file holds them, as
# ACTIVITY_NN.png (pictures under 150×150 pixels, icons and buttons, are left out).
python3 - "$work/gc/usr/share/gcompris-qt/rcc" "$out/gcompris" <<'PY'
import io, os, struct, sys
from PIL import Image
src, dst = sys.argv[1], sys.argv[2]
for activity in ["explore_farm_animals", "explore_world_animals", "erase", "categorization"]:
    data = open(os.path.join(src, activity + ".rcc"), "rb").read()
    n, at = 0, 0
    while (at := data.find(b"RIFF", at) + 1) > 0:
        if data[at + 7:at + 11] != b"WEBP":
            continue
        size = struct.unpack("<I", data[at + 3:at + 7])[0]
        picture = Image.open(io.BytesIO(data[at - 1:at + 7 + size]))
        if picture.width * picture.height >= 150 * 150:
            picture.convert("RGB").save(os.path.join(dst, f"{activity}_{n:02d}.png"))
            n += 1
PY
echo "photographs in $out"

#!/usr/bin/env bash
# Real photographs for `media_eval.py` beyond darknet's seven, from packages on the registries
# this project reaches: OpenCV's examples (Debian's `opencv-doc`), scikit-image's and
# matplotlib's sample data (their PyPI wheels). Unpacked, not installed, into DIR:
#   bash tools/media_photos.sh DIR   →   DIR/opencv/…, DIR/skimage/…, DIR/matplotlib/…
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
echo "photographs in $out"

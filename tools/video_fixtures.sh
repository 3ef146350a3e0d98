#!/usr/bin/env bash
# The video fixtures the tests decode, written by Debian's ffmpeg (apt-get install ffmpeg;
# the tests themselves need no ffmpeg). Run from the repository root; it overwrites them.
#
# crates/media/tests/fixtures/: 2-second 64x48 test patterns at 10 frames a second in every
# codec and container the media crate decodes, 8-bit and 10-bit.
# crates/vllm-srun/tests/fixtures/: one clip in four forms (H.264 in MP4, VP9 and AV1 in WebM,
# VP8 in Matroska): a 640x480 window panning 128 pixels right across darknet's dog.jpg for 5 s
# at 10 frames a second, scaled to 480x360.
set -euo pipefail
ff() { ffmpeg -v error -y "$@"; }
m=crates/media/tests/fixtures
pattern=(-f lavfi -i testsrc=size=64x48:rate=10:duration=2)
ff "${pattern[@]}" -pix_fmt yuv420p -c:v libvpx-vp9 -crf 30 -b:v 0 "$m/clip-vp9.webm"
ff "${pattern[@]}" -pix_fmt yuv420p10le -c:v libvpx-vp9 -crf 30 -b:v 0 "$m/clip-vp9-10bit.webm"
ff "${pattern[@]}" -pix_fmt yuv420p -c:v libaom-av1 -crf 30 -b:v 0 -cpu-used 8 "$m/clip-av1.webm"
ff "${pattern[@]}" -pix_fmt yuv444p10le -c:v libaom-av1 -crf 30 -b:v 0 -cpu-used 8 "$m/clip-av1-444-10bit.mkv"
ff "${pattern[@]}" -pix_fmt yuv420p -c:v libx264 -crf 23 "$m/clip-h264.mkv"

v=crates/vllm-srun/tests/fixtures
mkdir -p "$v"
pan=(-loop 1 -framerate 10 -i /usr/share/darknet/data/dog.jpg
     -vf "crop=640:480:'floor(128*n/49)':96,scale=480:360,format=yuv420p" -frames:v 50 -g 25)
ff "${pan[@]}" -c:v libx264 -crf 20 "$v/dog-h264.mp4"
ff "${pan[@]}" -c:v libvpx-vp9 -crf 24 -b:v 0 "$v/dog-vp9.webm"
ff "${pan[@]}" -c:v libaom-av1 -crf 24 -b:v 0 -cpu-used 8 "$v/dog-av1.webm"
ff "${pan[@]}" -c:v libvpx -crf 12 -b:v 1M "$v/dog-vp8.mkv"

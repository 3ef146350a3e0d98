"""A synthetic box set, and the confidence calibration fitted on it, judged on photos it never saw.

Usage: python3 tools/boxset.py URL MODEL [SCENES] [PHOTOS_DIR]   (needs Pillow)

Scenes are composed here: a background without objects (a strip of sky, water or sea from
darknet's photographs, `box_marks.json` "backgrounds") with one to three cut-outs of the
objects marked by hand on those photographs ("present"), pasted at random places and sizes, so
every object's true box is known. Each scene asks, one question each, for every pasted kind
that appears once ("the dog"), for the left and right one of a kind that appears twice, and
for a kind that is not there. MODEL (served with `--detector MODEL=nanodet-coco`) answers
them through POST /v1/decisions.

A box is right when it overlaps the true one by at least half (an absent target's box is never
right). The confidence the server answers is fitted to that outcome by a logistic curve on its
log-odds, confidence = sigmoid(a + b * logit(answered)), judged
leave-one-photo-out: each cut-out's source photograph is held out in turn, the curve fitted on
the scenes of the other cut-outs and scored on the held-out ones. Prints the share of right
boxes, the Brier score and the expected calibration error (10 bins) of the raw and the fitted
confidence on held-out scenes, the curve fitted on all scenes, and the highest fitted
confidence an absent target got.

The engine's `CALIBRATION` (decision/locate.rs) is the curve this fitted when the engine still
answered the raw confidence (the probability the kind was read right times the detector's
score, commit 5272982): 160 scenes, a = 2.1959, b = 1.4907. Against an engine that answers
with it, a fit near a = 0, b = 1 says the calibration still holds.
"""

import io
import random
import sys

from box_client import ask_box, brier, compose, ece, fit, iou, logit, sigmoid

URL, MODEL = sys.argv[1], sys.argv[2]
SCENES = int(sys.argv[3]) if len(sys.argv) > 3 else 120
PHOTOS = sys.argv[4] if len(sys.argv) > 4 else "/usr/share/darknet/data"
ABSENT_KINDS = ["cat", "car", "elephant", "umbrella", "chair", "bus", "sheep", "cow"]


def scene(rng):
    """A picture and its questions: (instructions, true box or None, source photo)."""
    canvas, placed, bg_name = compose(rng, PHOTOS)
    asked = []
    kinds = [k for _, k, _ in placed]
    for kind in set(kinds):
        mine = sorted((o for o in placed if o[1] == kind), key=lambda o: o[0][0] + o[0][2])
        if len(mine) == 1:
            asked.append((f"the {kind}", mine[0][0], mine[0][2]))
        elif len(mine) == 2:
            asked.append((f"the {kind} on the left", mine[0][0], mine[0][2]))
            asked.append((f"the {kind} on the right", mine[1][0], mine[1][2]))
    absent = rng.choice([k for k in ABSENT_KINDS if k not in kinds])
    asked.append((f"the {absent}", None, bg_name))
    out = io.BytesIO()
    canvas.save(out, format="JPEG", quality=90)
    return out.getvalue(), asked


def ask(picture, instructions):
    return ask_box(URL, MODEL, picture, instructions)


rng = random.Random(20261204)
rows = []
for s in range(SCENES):
    picture, asked = scene(rng)
    for instructions, truth, source in asked:
        got, conf = ask(picture, instructions)
        right = truth is not None and iou(got, truth) >= 0.5
        rows.append((conf, 1.0 if right else 0.0, source, truth is None))
held = []
for source in sorted({r[2] for r in rows}):
    a, b = fit([r for r in rows if r[2] != source])
    held += [(r[0], sigmoid(a + b * logit(r[0])), r[1]) for r in rows if r[2] == source]
raw_pairs = [(r, y) for r, _, y in held]
fit_pairs = [(f, y) for _, f, y in held]
a, b = fit(rows)
right = sum(r[1] for r in rows)
print(f"{len(rows)} questions over {SCENES} scenes; right boxes {int(right)} "
      f"({right / len(rows):.3f} of all, absent targets included)")
print(f"held out by source photo: raw Brier {brier(raw_pairs):.4f} ECE {ece(raw_pairs):.4f}; "
      f"fitted Brier {brier(fit_pairs):.4f} ECE {ece(fit_pairs):.4f}")
print(f"fitted on all: a = {a:.4f}, b = {b:.4f}")
absent = [sigmoid(a + b * logit(r[0])) for r in rows if r[3]]
print(f"absent targets: highest fitted confidence {max(absent):.3f}, "
      f"share under 0.5 {sum(p < 0.5 for p in absent) / len(absent):.3f} of {len(absent)}")

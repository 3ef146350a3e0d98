"""Box answers against boxes marked by hand on Debian's darknet test photographs.

Usage: python3 tools/box_check.py URL MODEL [PHOTOS_DIR]

Asks MODEL (served with a detector: `serve --detector MODEL=nanodet-coco`) one box question
per mark of `box_marks.json` (present and absent targets), each alone, through POST /v1/decisions. Prints each
answer's overlap (IoU) with the marked box and its confidence, then: the share of present
targets whose box overlaps the marked one by at least half, the mean confidence of right and
wrong boxes, the highest confidence on an absent target, and the Brier score of the confidence
as the probability of a right box (absent targets count as wrong boxes). The marks were made
by eye on a 10 % grid; they are the truth here, not the detector's reference output.
"""

import json
import os
import sys

from box_client import ask_box, iou

URL, MODEL = sys.argv[1], sys.argv[2]
PHOTOS = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/darknet/data"

# (photo, instructions, [left, top, right, bottom] as fractions of the photo as sent, kind).
MARKS = json.load(open(os.path.join(os.path.dirname(__file__), "box_marks.json")))
MARKED = [(p, i, b) for p, i, b, _ in MARKS["present"]]
ABSENT = [tuple(a) for a in MARKS["absent"]]


def ask(photo, instructions):
    return ask_box(URL, MODEL, open(os.path.join(PHOTOS, photo), "rb").read(), instructions)


rows = []
for photo, instructions, marked in MARKED:
    got, c = ask(photo, instructions)
    o = iou(got, marked)
    rows.append((o >= 0.5, c))
    print(f"{photo:12} {instructions:30} IoU {o:.3f}  confidence {c:.3f}")
absent = []
for photo, instructions in ABSENT:
    _, c = ask(photo, instructions)
    absent.append(c)
    rows.append((False, c))
    print(f"{photo:12} {instructions:30} absent     confidence {c:.3f}")
present = rows[: len(MARKED)]
right = [c for ok, c in present if ok]
wrong = [c for ok, c in present if not ok]
mean = lambda v: sum(v) / len(v) if v else float("nan")
brier = mean([(c - (1.0 if ok else 0.0)) ** 2 for ok, c in rows])
print(f"box right (IoU >= 0.5): {len(right)}/{len(present)}; mean confidence right {mean(right):.3f}, "
      f"wrong {mean(wrong):.3f}; absent targets: highest confidence {max(absent):.3f}; "
      f"Brier {brier:.3f} over {len(rows)}")

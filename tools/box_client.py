"""What tools/box_check.py, tools/boxset.py and tools/media_eval.py share: one box question
asked of a running server about a picture, the overlap of two boxes, and scenes composed from
the objects marked by hand on darknet's photographs (`box_marks.json`), and the logistic
calibration curve fitted to answers and how well probabilities are calibrated."""

import base64
import json
import math
import os
import urllib.request

MARKS = json.load(open(os.path.join(os.path.dirname(__file__), "box_marks.json")))
W, H = 640, 480
_photos = {}


def crop(photos_dir, name, box):
    """The part `box` (fractions of width and height) of darknet's photograph `name`."""
    from PIL import Image

    if name not in _photos:
        _photos[name] = Image.open(os.path.join(photos_dir, name)).convert("RGB")
    p = _photos[name]
    return p.crop((int(box[0] * p.width), int(box[1] * p.height),
                   int(box[2] * p.width), int(box[3] * p.height)))


# One cut-out per marked object (the same box marked twice counts once).
CUTOUTS = []
for _name, _, _box, _kind in MARKS["present"]:
    if not any(c[0] == _name and c[1] == _box for c in CUTOUTS):
        CUTOUTS.append((_name, _box, _kind))


def compose(rng, photos_dir):
    """A scene: a background without objects (a strip of sky, water or sea) with one to three
    cut-outs pasted at random places and sizes, none overlapping another much. Returns the
    picture (PIL) and each pasted object as (true box, kind, source photo)."""
    bg_name, region = rng.choice(MARKS["backgrounds"])
    canvas = crop(photos_dir, bg_name, region).resize((W, H))
    placed = []
    for _ in range(rng.randint(1, 3)):
        name, box, kind = rng.choice(CUTOUTS)
        cut = crop(photos_dir, name, box)
        scale = rng.uniform(0.25, 0.6) * H / cut.height
        w, h = max(8, int(cut.width * scale)), max(8, int(cut.height * scale))
        if w > 0.6 * W:
            w, h = int(0.6 * W), int(h * 0.6 * W / w)
        for _ in range(20):
            x, y = rng.randint(0, W - w), rng.randint(0, H - h)
            b = [x / W, y / H, (x + w) / W, (y + h) / H]
            if all(iou(b, o[0]) < 0.1 for o in placed):
                canvas.paste(cut.resize((w, h)), (x, y))
                placed.append((b, kind, name))
                break
    return canvas, placed, bg_name


def ask_box(url, model, picture, instructions):
    """The box ([left, top, right, bottom]) and confidence MODEL answers about `picture` (bytes)."""
    body = {"model": model, "state": "<p>",
            "assets": {"<p>": {"type": "image", "data_base64": base64.b64encode(picture).decode()}},
            "questions": {"w": {"type": "box", "instructions": instructions}}}
    req = urllib.request.Request(url + "/v1/decisions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    a = json.load(urllib.request.urlopen(req, timeout=300))["answers"]["w"]
    b = a["box"]
    return [b["left"], b["top"], b["right"], b["bottom"]], a["confidence"]


def iou(a, b):
    """Intersection over union of two [left, top, right, bottom] boxes."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    area = lambda x: (x[2] - x[0]) * (x[3] - x[1])
    return w * h / (area(a) + area(b) - w * h)


def logit(p):
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def sigmoid(z):
    return 1 / (1 + math.exp(-min(max(z, -50.0), 50.0)))


def fit(rows):
    """Logistic regression of the outcome on logit(raw) (`rows` of (raw, outcome, ...)) by
    Newton's method, a little ridge on the curvature keeping it finite on separable data, each
    step halved until the log-likelihood improves (a full step can overshoot and diverge)."""
    xs = [(logit(r[0]), r[1]) for r in rows]

    def loss(a, b):
        return sum(math.log(1 + math.exp(-(2 * y - 1) * min(max(a + b * x, -50), 50)))
                   for x, y in xs)

    a, b = 0.0, 1.0
    for _ in range(100):
        ga = gb = haa = hab = hbb = 0.0
        for x, y in xs:
            p = sigmoid(a + b * x)
            ga += p - y
            gb += (p - y) * x
            w = p * (1 - p) + 1e-9
            haa, hab, hbb = haa + w, hab + w * x, hbb + w * x * x
        haa, hbb = haa + 1e-3, hbb + 1e-3
        det = haa * hbb - hab * hab
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        step, before = 1.0, loss(a, b)
        while step > 1e-6 and loss(a - step * da, b - step * db) > before:
            step /= 2
        a, b = a - step * da, b - step * db
    return a, b


def brier(pairs):
    return sum((p - y) ** 2 for p, y in pairs) / len(pairs)


def ece(pairs, bins=10):
    """Expected calibration error of (probability, outcome) pairs over `bins` equal bins."""
    total = 0.0
    for k in range(bins):
        inside = [(p, y) for p, y in pairs
                  if k / bins <= p < (k + 1) / bins or (k == bins - 1 and p == 1.0)]
        if inside:
            total += len(inside) * abs(sum(p for p, _ in inside) / len(inside)
                                       - sum(y for _, y in inside) / len(inside))
    return total / len(pairs)

"""What tools/box_check.py and tools/boxset.py share: one box question asked of a running
server about a picture, and the overlap of two boxes."""

import base64
import json
import urllib.request


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

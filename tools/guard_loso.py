"""Which features a guard head should read, judged on jailbreak sources it was not trained on.

    python3 tools/guard_loso.py URL CASES.jsonl TOKENIZER.json
    (needs numpy, scikit-learn and tokenizers; URL serves `minilm-l6` for /v1/embeddings, and
    TOKENIZER.json is its tokenizer, e.g. ~/.cache/vllm-srun/models/minilm-l6/tokenizer.json)

CASES.jsonl is what `tools/guard_train.py` writes. For each source of jailbreaks in it
(its `domain`), a logistic head is trained on every other source and judged on that one: the
share of its jailbreaks caught at the threshold that flags 2 % of the other sources' ordinary
cases (scored out of fold). Two kinds of features are compared: MiniLM's vector of the first
510 tokens (as `adapt --model minilm-l6` reads a state) and the text's character n-grams of 3
to 5 characters in 4,096 hashed buckets, idf-weighted, unit length (scikit-learn's hashing
vectorizer, the same recipe as `engine::lexical`, not the same hash). Also prints each one's
5-fold cross-validated AUC over all cases.
"""
import json
import sys
import urllib.request

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from tokenizers import Tokenizer

URL, CASES, TOKENIZER = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(line) for line in open(CASES)]
texts = [r["state"] for r in rows]
y = np.array([r["questions"]["vsr_jailbreak"]["ground_truth"] for r in rows], int)
source = np.array([r["domain"] for r in rows])


def minilm_vectors():
    tok = Tokenizer.from_file(TOKENIZER)
    out = []
    for s in range(0, len(texts), 16):
        batch = [tok.encode(t, add_special_tokens=False).ids[:510] for t in texts[s:s + 16]]
        body = json.dumps({"model": "minilm-l6", "input": batch}).encode()
        req = urllib.request.Request(URL + "/v1/embeddings", body, {"content-type": "application/json"})
        out += [d["embedding"] for d in json.load(urllib.request.urlopen(req))["data"]]
    return np.array(out, np.float32)


def head(kind):
    if kind == "minilm":
        return make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=3000))
    return make_pipeline(
        HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), n_features=4096,
                          alternate_sign=False, norm=None),
        TfidfTransformer(sublinear_tf=True),
        LogisticRegression(C=10, max_iter=3000, class_weight="balanced"))


def main():
    features = {"minilm": minilm_vectors(), "ngrams": texts}
    pick = lambda kind, idx: features[kind][idx] if kind == "minilm" else [texts[i] for i in idx]
    sources = sorted({s for s, v in zip(source, y) if v})
    for kind in features:
        caught = []
        for held in sources:
            rest = np.where(source != held)[0]
            jail = np.where((source == held) & (y == 1))[0]
            p = head(kind).fit(pick(kind, rest), y[rest]).predict_proba(pick(kind, jail))[:, 1]
            oof = np.zeros(len(y))
            for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(rest, y[rest]):
                m = head(kind).fit(pick(kind, rest[tr]), y[rest[tr]])
                oof[rest[te]] = m.predict_proba(pick(kind, rest[te]))[:, 1]
            ordinary = np.sort(oof[rest][y[rest] == 0])[::-1]
            threshold = ordinary[int(0.02 * len(ordinary))]
            caught.append((held, len(jail), float((p > threshold).mean())))
        oof = np.zeros(len(y))
        for tr, te in StratifiedKFold(5, shuffle=True, random_state=1).split(y, y):
            oof[te] = head(kind).fit(pick(kind, tr), y[tr]).predict_proba(pick(kind, te))[:, 1]
        cells = "  ".join(f"{s} ({n}) {c:.2f}" for s, n, c in caught)
        print(f"{kind}: {cells}  | mean {np.mean([c for *_, c in caught]):.3f}  "
              f"| 5-fold AUC {roc_auc_score(y, oof):.4f}")


if __name__ == "__main__":
    main()

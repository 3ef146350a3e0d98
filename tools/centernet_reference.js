// The reference run of CenterNet for crates/backend-detector's fixtures: the original TF.js
// graph model run by TensorFlow.js itself (not by our code), decoded by the graph's own
// `tower_0/detections` output (its 3×3 max-pool peaks, top 100, boxes from the cell corner).
//
//   (the same set-up as tools/nanodet_reference.js: /tmp/ref and the `pixels` example's PPMs)
//   NODE_PATH=/tmp/ref/node_modules node tools/centernet_reference.js MODEL_DIR /tmp/px/*.ppm \
//       > crates/backend-detector/tests/fixtures/centernet.json
//   NODE_PATH=/tmp/ref/node_modules TFJS_BACKEND=wasm node tools/centernet_reference.js --time MODEL_DIR IMAGE
//
// MODEL_DIR holds `centernet.json` and `centernet.bin` (`vllm-srun models pull centernet-coco`).
// Each image is resized to 512×512 by bilinear interpolation with half-pixel centres, kept
// from 0 to 255, NHWC. Every detection scored ≥ 0.2 is a candidate; candidates of one class
// are suppressed above IoU 0.5 (highest score first). Boxes are printed as fractions of the
// image, with the raw score. `--time` prints the median time of 20 runs of the graph up to
// its two raw outputs (after 3 warm-up runs) on the backend given by TFJS_BACKEND.
const {
  tf, resized, suppress, reference,
} = require('./tfjs_graph');

const SIZE = 512;
const MIN_SCORE = 0.2;
const IOU = 0.5;

function input(file) {
  return tf.tidy(() => resized(file, SIZE).expandDims(0));
}

// The graph's `detections`: 100 rows of x1, y1, x2, y2 (input pixels), score, class.
function decode([detections]) {
  const cands = [];
  for (let i = 0; i < 100; i++) {
    const [x1, y1, x2, y2, score, cls] = detections.slice(i * 6, i * 6 + 6);
    if (score < MIN_SCORE) continue;
    const box = [x1, y1, x2, y2].map((v) => Math.min(1, Math.max(0, v / SIZE)));
    cands.push({ class: cls, score, box });
  }
  return suppress(cands, IOU);
}

reference({
  name: 'centernet',
  input,
  timed: ['tower_0/keypoints', 'tower_0/wh'],
  outputs: ['tower_0/detections'],
  decode,
}).catch((e) => {
  console.error(e);
  process.exit(1);
});

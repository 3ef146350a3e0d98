// The reference run of NanoDet for crates/backend-detector's fixtures: the original TF.js graph
// model run by TensorFlow.js itself (not by our code), on the test photographs.
//
//   mkdir -p /tmp/ref && cd /tmp/ref && npm install @tensorflow/tfjs@4.22.0 jpeg-js@0.4.4 \
//       @tensorflow/tfjs-backend-wasm@4.22.0
//   cargo run -p backend-detector --example pixels -- /tmp/px /usr/share/darknet/data/{dog,horses,person,giraffe,kite,eagle}.jpg
//   NODE_PATH=/tmp/ref/node_modules node tools/nanodet_reference.js MODEL_DIR /tmp/px/*.ppm \
//       > crates/backend-detector/tests/fixtures/nanodet.json
//   NODE_PATH=/tmp/ref/node_modules node tools/nanodet_reference.js --time MODEL_DIR IMAGE
//
// MODEL_DIR holds `nanodet.json` and `nanodet.bin` (`vllm-srun models pull nanodet-coco`).
// An image is a binary PPM (the pixels our decoder made of a photograph, written by the
// `pixels` example, so that the two runs read the same pixels) or a JPEG (decoded by jpeg-js,
// which differs from the image crate's decoder by about one level per channel on average).
// Each image is resized to 416×416 by bilinear interpolation with
// half-pixel centres, scaled to [0, 1], laid out NCHW and run through the graph. The six
// outputs are decoded as the model's head defines them: per stride 8/16/32 a grid cell's
// centre ((col + ½)·stride, (row + ½)·stride), class scores already sigmoided, each side's
// distance Σ softmax(11 bins)·k·stride. Every class score ≥ 0.2 is a candidate; candidates of
// one class are suppressed above IoU 0.5 (highest score first). Boxes are printed as fractions
// of the image, with the raw score. `--time` prints the median forward time of 20 runs
// (after 3 warm-up runs) on the backend given by TFJS_BACKEND (default `cpu`).
const {
  tf, resized, suppress, reference,
} = require('./tfjs_graph');

const SIZE = 416;
const STRIDES = [8, 16, 32];
const BINS = 11;
const MIN_SCORE = 0.2;
const IOU = 0.5;

function input(file) {
  return tf.tidy(() => resized(file, SIZE).div(255).transpose([2, 0, 1]).expandDims(0));
}

function decode(outputs) {
  const cands = [];
  STRIDES.forEach((stride, level) => {
    const scores = outputs[level];
    const dist = outputs[level + 3];
    const grid = SIZE / stride;
    for (let i = 0; i < grid * grid; i++) {
      const cx = ((i % grid) + 0.5) * stride;
      const cy = (Math.floor(i / grid) + 0.5) * stride;
      let sides = null;
      for (let c = 0; c < 80; c++) {
        const score = scores[i * 80 + c];
        if (score < MIN_SCORE) continue;
        if (!sides) {
          sides = [0, 1, 2, 3].map((s) => {
            const bins = dist.slice(i * 44 + s * BINS, i * 44 + (s + 1) * BINS);
            const max = Math.max(...bins);
            const e = Array.from(bins, (v) => Math.exp(v - max));
            const sum = e.reduce((x, y) => x + y, 0);
            return e.reduce((acc, v, k) => acc + (v / sum) * k, 0) * stride;
          });
        }
        const box = [cx - sides[0], cy - sides[1], cx + sides[2], cy + sides[3]]
          .map((v) => Math.min(1, Math.max(0, v / SIZE)));
        cands.push({ class: c, score, box });
      }
    }
  });
  return suppress(cands, IOU);
}

// The signature's outputs in the order strides 8, 16, 32 scores, then their distributions.
const OUTPUTS = ['Identity:0', 'Identity_1:0', 'Identity_2:0', 'Identity_3:0', 'Identity_4:0',
  'Identity_5:0'];

reference({
  name: 'nanodet', input, timed: OUTPUTS, outputs: OUTPUTS, decode,
}).catch((e) => {
  console.error(e);
  process.exit(1);
});

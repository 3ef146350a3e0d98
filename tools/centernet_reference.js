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
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const jpeg = require('jpeg-js');
// TensorFlow.js's WebAssembly backend (XNNPACK, SIMD), when installed: TFJS_BACKEND=wasm.
try {
  require('@tensorflow/tfjs-backend-wasm');
} catch (e) {
  // Only the pure JavaScript `cpu` backend.
}

const SIZE = 512;
const MIN_SCORE = 0.2;
const IOU = 0.5;

async function load(dir) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'centernet.json'), 'utf8'));
  const bin = fs.readFileSync(path.join(dir, 'centernet.bin'));
  const weightData = bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength);
  const handler = {
    load: async () => ({
      modelTopology: json.modelTopology,
      format: json.format,
      generatedBy: json.generatedBy,
      convertedBy: json.convertedBy,
      signature: json.signature,
      weightSpecs: json.weightsManifest.flatMap((g) => g.weights),
      weightData,
    }),
  };
  return tf.loadGraphModel(handler);
}

// A binary PPM (P6, maxval 255, no comments), as the `pixels` example writes it.
function ppm(bytes) {
  const head = bytes.subarray(0, 64).toString('latin1').match(/^P6\s+(\d+)\s+(\d+)\s+255\s/);
  if (!head) throw new Error('not a binary PPM');
  const width = Number(head[1]);
  const height = Number(head[2]);
  return { width, height, data: bytes.subarray(head[0].length, head[0].length + width * height * 3) };
}

function input(file) {
  const bytes = fs.readFileSync(file);
  const img = file.endsWith('.ppm') ? ppm(bytes)
    : jpeg.decode(bytes, { useTArray: true, formatAsRGBA: false });
  return tf.tidy(() => {
    const rgb = tf.tensor3d(img.data, [img.height, img.width, 3], 'int32').toFloat();
    const resized = tf.image.resizeBilinear(rgb, [SIZE, SIZE], false, true);
    return resized.expandDims(0);
  });
}

function iou(a, b) {
  const w = Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0]));
  const h = Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1]));
  const inter = w * h;
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return union > 0 ? inter / union : 0;
}

function decode(detections) {
  const cands = [];
  for (let i = 0; i < 100; i++) {
    const [x1, y1, x2, y2, score, cls] = detections.slice(i * 6, i * 6 + 6);
    if (score < MIN_SCORE) continue;
    const box = [x1, y1, x2, y2].map((v) => Math.min(1, Math.max(0, v / SIZE)));
    cands.push({ class: cls, score, box });
  }
  cands.sort((a, b) => b.score - a.score);
  const kept = [];
  for (const c of cands) {
    if (kept.every((k) => k.class !== c.class || iou(k.box, c.box) <= IOU)) kept.push(c);
  }
  return kept;
}

async function main() {
  const args = process.argv.slice(2);
  const time = args[0] === '--time';
  if (time) args.shift();
  await tf.setBackend(process.env.TFJS_BACKEND || 'cpu');
  const model = await load(args[0]);
  const names = ['tower_0/keypoints', 'tower_0/wh'];
  if (time) {
    const x = input(args[1]);
    const runs = [];
    for (let r = 0; r < 23; r++) {
      const t0 = process.hrtime.bigint();
      const outs = model.execute(x, names);
      await Promise.all(outs.map((o) => o.data()));
      runs.push(Number(process.hrtime.bigint() - t0) / 1e6);
      outs.forEach((o) => o.dispose());
    }
    const sorted = runs.slice(3).sort((a, b) => a - b);
    console.log(JSON.stringify({ backend: tf.getBackend(), median_ms: sorted[10] }));
    return;
  }
  const fixture = {};
  for (const file of args.slice(1)) {
    const x = input(file);
    const outs = [model.execute(x, 'tower_0/detections')];
    const data = await Promise.all(outs.map((o) => o.data()));
    fixture[path.basename(file).replace(/\.[^.]*$/, '')] = decode(data[0]).map((d) => ({
      class: d.class,
      score: Number(d.score.toFixed(5)),
      box: d.box.map((v) => Number(v.toFixed(5))),
    }));
    outs.forEach((o) => o.dispose());
    x.dispose();
  }
  // One line per image and detection, so that a fixture's diff reads.
  const lines = Object.entries(fixture).map(([name, dets]) =>
    ` ${JSON.stringify(name)}: [\n${dets.map((d) => `  ${JSON.stringify(d)}`).join(',\n')}\n ]`);
  console.log(`{\n${lines.join(',\n')}\n}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

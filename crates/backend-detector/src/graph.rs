//! A TensorFlow.js graph model (`model.json` topology plus its weight shards) run by a small
//! interpreter over candle tensors on the CPU.
//!
//! Only the operators the detectors in the catalogue use are known; a graph with any other
//! is refused when it loads, never half-run. Weights are read by name from the manifest
//! (float32, float16-quantized or uint8-affine-quantized floats, int32), once, at load. The
//! nodes are put in an order where each one follows its inputs, once, at load; a run walks
//! that order and drops each value after its last use.
//!
//! Layout: the graph says where it transposes. A `Transpose` here is a view (candle's
//! permute copies nothing), so NCHW → NHWC → convolution (candle's is NCHW) → NHWC costs
//! no copy around the convolution; the element-wise operators after it read through the
//! view.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde::Deserialize;

use crate::DetectError;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelJson {
    model_topology: Topology,
    weights_manifest: Vec<WeightGroup>,
}

#[derive(Debug, Deserialize)]
struct Topology {
    node: Vec<NodeJson>,
}

#[derive(Debug, Deserialize)]
struct NodeJson {
    name: String,
    op: String,
    #[serde(default)]
    input: Vec<String>,
    #[serde(default)]
    attr: HashMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct WeightGroup {
    paths: Vec<String>,
    weights: Vec<WeightSpec>,
}

#[derive(Debug, Deserialize)]
struct WeightSpec {
    name: String,
    shape: Vec<usize>,
    dtype: String,
    #[serde(default)]
    quantization: Option<Quantization>,
}

#[derive(Debug, Deserialize)]
struct Quantization {
    dtype: String,
    #[serde(default)]
    scale: Option<f32>,
    #[serde(default)]
    min: Option<f32>,
}

/// A value flowing through the graph: a float tensor, or a small integer array (shapes,
/// paddings, sizes) kept on the host.
#[derive(Debug, Clone)]
enum Value {
    F(Tensor),
    I(Vec<usize>, Vec<i64>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Placeholder,
    Const,
    Identity,
    Transpose,
    Pad,
    PadV2,
    /// `padding`: zeros on every side, taken over from a `Pad` the convolution alone read
    /// (the convolution pads as it reads).
    Conv2D {
        stride: (usize, usize),
        padding: usize,
    },
    /// `pad`: `(size, value)` on every side, taken over from a `PadV2` the pooling alone read
    /// (a window that reaches past the edge also counts `value`, as the padded input would).
    MaxPool {
        kernel: (usize, usize),
        stride: (usize, usize),
        pad: Option<(usize, f32)>,
    },
    Add,
    LeakyRelu(f32),
    Sigmoid,
    Concat,
    SplitV,
    Reshape,
    ResizeBilinear,
    SparseToDense,
}

#[derive(Debug)]
struct Node {
    name: String,
    op: Op,
    /// (index of the producing node, which of its outputs)
    inputs: Vec<(usize, usize)>,
}

/// A loaded graph, ready to run.
#[derive(Debug)]
pub struct Graph {
    nodes: Vec<Node>,
    /// Node indices in an order where every node follows its inputs (only those the
    /// outputs need).
    order: Vec<usize>,
    consts: HashMap<usize, Value>,
    /// For each node index in `order`, the position in `order` of its last reader.
    last_use: HashMap<usize, usize>,
    input: usize,
    outputs: Vec<(usize, usize)>,
}

fn bad(msg: impl Into<String>) -> DetectError {
    DetectError::Graph(msg.into())
}

/// The integers of an attribute list (`{"list": {"i": ["1","2","2","1"]}}`).
fn int_list(attr: &HashMap<String, serde_json::Value>, key: &str) -> Result<Vec<i64>, DetectError> {
    let list = attr
        .get(key)
        .and_then(|v| v.get("list"))
        .and_then(|l| l.get("i"))
        .and_then(|i| i.as_array())
        .ok_or_else(|| bad(format!("attribute {key} missing")))?;
    list.iter()
        .map(|v| match v {
            serde_json::Value::String(s) => s.parse::<i64>().map_err(|_| bad("bad integer")),
            serde_json::Value::Number(n) => n.as_i64().ok_or_else(|| bad("bad integer")),
            _ => Err(bad("bad integer")),
        })
        .collect()
}

/// A string attribute (base64 in the JSON).
fn str_attr(attr: &HashMap<String, serde_json::Value>, key: &str) -> Option<String> {
    use base64::Engine as _;
    let s = attr.get(key)?.get("s")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    String::from_utf8(bytes).ok()
}

fn bool_attr(attr: &HashMap<String, serde_json::Value>, key: &str) -> bool {
    attr.get(key)
        .and_then(|v| v.get("b"))
        .and_then(|b| b.as_bool())
        == Some(true)
}

/// NHWC window attributes `[1, h, w, 1]` as `(h, w)`, checking the layout and padding this
/// interpreter supports.
fn window(
    attr: &HashMap<String, serde_json::Value>,
    key: &str,
    name: &str,
) -> Result<(usize, usize), DetectError> {
    let v = int_list(attr, key)?;
    if v.len() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1 {
        return Err(bad(format!("{name}: {key} {v:?} not supported")));
    }
    Ok((v[1] as usize, v[2] as usize))
}

fn parse_op(node: &NodeJson) -> Result<Op, DetectError> {
    let a = &node.attr;
    let nhwc_valid = |what: &str| -> Result<(), DetectError> {
        let format = str_attr(a, "data_format").unwrap_or_else(|| "NHWC".into());
        let padding = str_attr(a, "padding").unwrap_or_default();
        if format != "NHWC" || padding != "VALID" {
            return Err(bad(format!(
                "{what} {}: {format}/{padding} not supported",
                node.name
            )));
        }
        Ok(())
    };
    Ok(match node.op.as_str() {
        "Placeholder" => Op::Placeholder,
        "Const" => Op::Const,
        "Identity" => Op::Identity,
        "Transpose" => Op::Transpose,
        "Pad" => Op::Pad,
        "PadV2" => Op::PadV2,
        "Conv2D" => {
            nhwc_valid("Conv2D")?;
            if let Ok(d) = int_list(a, "dilations") {
                if d.iter().any(|&x| x != 1) {
                    return Err(bad(format!("Conv2D {}: dilation not supported", node.name)));
                }
            }
            Op::Conv2D {
                stride: window(a, "strides", &node.name)?,
                padding: 0,
            }
        }
        "MaxPool" => {
            nhwc_valid("MaxPool")?;
            Op::MaxPool {
                kernel: window(a, "ksize", &node.name)?,
                stride: window(a, "strides", &node.name)?,
                pad: None,
            }
        }
        "Add" | "AddV2" => Op::Add,
        "LeakyRelu" => Op::LeakyRelu(
            a.get("alpha")
                .and_then(|v| v.get("f"))
                .and_then(|f| f.as_f64())
                .unwrap_or(0.2) as f32,
        ),
        "Sigmoid" => Op::Sigmoid,
        "ConcatV2" => Op::Concat,
        "SplitV" => Op::SplitV,
        "Reshape" => Op::Reshape,
        "ResizeBilinear" => {
            if bool_attr(a, "align_corners") || !bool_attr(a, "half_pixel_centers") {
                return Err(bad(format!(
                    "ResizeBilinear {}: only half-pixel centres are supported",
                    node.name
                )));
            }
            Op::ResizeBilinear
        }
        "SparseToDense" => Op::SparseToDense,
        other => {
            return Err(bad(format!(
                "operator {other} ({}) not supported",
                node.name
            )))
        }
    })
}

/// Reads the weights of the manifest, in its order, from the concatenated shards.
fn read_weights(specs: &[WeightSpec], bytes: &[u8]) -> Result<HashMap<String, Value>, DetectError> {
    let mut out = HashMap::new();
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], DetectError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len());
        let end = end.ok_or_else(|| bad("weight data shorter than its manifest"))?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    for w in specs {
        let count: usize = w.shape.iter().product();
        let value = match (&w.quantization, w.dtype.as_str()) {
            (None, "float32") => {
                let raw = take(count * 4)?;
                let v: Vec<f32> = raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (Some(q), "float32") if q.dtype == "float16" => {
                let raw = take(count * 2)?;
                let v: Vec<f32> = raw
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (Some(q), "float32") if q.dtype == "uint8" => {
                let (scale, min) = (q.scale.unwrap_or(1.0), q.min.unwrap_or(0.0));
                let v: Vec<f32> = take(count)?
                    .iter()
                    .map(|&b| f32::from(b) * scale + min)
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (None, "int32") => {
                let raw = take(count * 4)?;
                let v: Vec<i64> = raw
                    .chunks_exact(4)
                    .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect();
                Value::I(w.shape.clone(), v)
            }
            (q, dtype) => {
                return Err(bad(format!(
                    "weight {}: {dtype} with {:?} not supported",
                    w.name,
                    q.as_ref().map(|q| &q.dtype)
                )))
            }
        };
        out.insert(w.name.clone(), value);
    }
    if at != bytes.len() {
        return Err(bad("weight data longer than its manifest"));
    }
    Ok(out)
}

impl Graph {
    /// Loads `json` (a graph model's `model.json`) with its weight shards from `dir`, and the
    /// named outputs (`node:index`).
    pub fn load(
        dir: &Path,
        json: &str,
        input: &str,
        outputs: &[&str],
    ) -> Result<Self, DetectError> {
        let model: ModelJson = serde_json::from_str(&std::fs::read_to_string(dir.join(json))?)
            .map_err(|e| bad(format!("{json}: {e}")))?;
        let mut specs = Vec::new();
        let mut bytes = Vec::new();
        for group in model.weights_manifest {
            for p in &group.paths {
                if p.contains("..") || p.starts_with('/') {
                    return Err(bad(format!("weight path {p:?} leaves the model directory")));
                }
                bytes.extend_from_slice(&std::fs::read(dir.join(p))?);
            }
            specs.extend(group.weights);
        }
        let mut weights = read_weights(&specs, &bytes)?;
        drop(bytes);

        let index: HashMap<&str, usize> = model
            .model_topology
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let reference = |s: &str| -> Result<(usize, usize), DetectError> {
            let (name, out) = match s.rsplit_once(':') {
                Some((n, o)) => (n, o.parse().map_err(|_| bad(format!("input {s:?}")))?),
                None => (s, 0),
            };
            let i = index
                .get(name)
                .ok_or_else(|| bad(format!("no node {name:?}")))?;
            Ok((*i, out))
        };
        let mut nodes = Vec::with_capacity(model.model_topology.node.len());
        let mut consts = HashMap::new();
        for (i, n) in model.model_topology.node.iter().enumerate() {
            let op = parse_op(n)?;
            if op == Op::Const {
                let v = weights
                    .remove(&n.name)
                    .ok_or_else(|| bad(format!("constant {} has no weights", n.name)))?;
                consts.insert(i, v);
            }
            let inputs = n
                .input
                .iter()
                .filter(|s| !s.starts_with('^'))
                .map(|s| reference(s))
                .collect::<Result<Vec<_>, _>>()?;
            nodes.push(Node {
                name: n.name.clone(),
                op,
                inputs,
            });
        }
        // Filters that only convolutions read are laid out once, here, as candle wants them.
        let mut readers: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (n, node) in nodes.iter().enumerate() {
            for (slot, &(i, _)) in node.inputs.iter().enumerate() {
                readers.entry(i).or_default().push((n, slot));
            }
        }
        fuse_pads(&mut nodes, &consts, &readers);
        let input = reference(input)?.0;
        if nodes[input].op != Op::Placeholder {
            return Err(bad("the input is not a placeholder"));
        }
        let outputs = outputs
            .iter()
            .map(|s| reference(s))
            .collect::<Result<Vec<_>, _>>()?;

        // Depth-first from the outputs, without recursion: a node is placed once all its
        // inputs are.
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut mark = vec![Mark::New; nodes.len()];
        let mut order = Vec::new();
        for &(root, _) in &outputs {
            let mut stack = vec![(root, false)];
            while let Some((n, expanded)) = stack.pop() {
                if expanded {
                    mark[n] = Mark::Done;
                    order.push(n);
                    continue;
                }
                match mark[n] {
                    Mark::Done => continue,
                    Mark::Open => return Err(bad(format!("cycle at {}", nodes[n].name))),
                    Mark::New => {}
                }
                mark[n] = Mark::Open;
                stack.push((n, true));
                for &(i, _) in nodes[n].inputs.iter().rev() {
                    if mark[i] == Mark::Open {
                        return Err(bad(format!("cycle at {}", nodes[i].name)));
                    }
                    if mark[i] == Mark::New {
                        stack.push((i, false));
                    }
                }
            }
        }
        let mut last_use = HashMap::new();
        for (pos, &n) in order.iter().enumerate() {
            for &(i, _) in &nodes[n].inputs {
                last_use.insert(i, pos);
            }
        }
        for &(o, _) in &outputs {
            last_use.insert(o, usize::MAX);
        }
        Ok(Self {
            nodes,
            order,
            consts,
            last_use,
            input,
            outputs,
        })
    }

    /// Runs the graph on one input tensor; the outputs in the order they were named.
    pub fn run(&self, x: Tensor) -> Result<Vec<Tensor>, DetectError> {
        let mut values: HashMap<usize, Vec<Value>> = HashMap::new();
        let mut x = Some(Value::F(x));
        for (pos, &n) in self.order.iter().enumerate() {
            let node = &self.nodes[n];
            let out = if n == self.input {
                vec![x.take().ok_or_else(|| bad("input read twice"))?]
            } else if node.op == Op::Const {
                let v = self.consts.get(&n).ok_or_else(|| bad("constant missing"))?;
                vec![v.clone()]
            } else {
                let args = node
                    .inputs
                    .iter()
                    .map(|&(i, k)| {
                        values
                            .get(&i)
                            .and_then(|v| v.get(k))
                            .ok_or_else(|| bad(format!("{}: input not computed", node.name)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                eval(node, &args).map_err(|e| bad(format!("{} ({:?}): {e}", node.name, node.op)))?
            };
            values.insert(n, out);
            for &(i, _) in &node.inputs {
                if self.last_use.get(&i) == Some(&pos) {
                    values.remove(&i);
                }
            }
        }
        self.outputs
            .iter()
            .map(|&(n, k)| match values.get(&n).and_then(|v| v.get(k)) {
                Some(Value::F(t)) => Ok(t.contiguous()?),
                _ => Err(bad("an output is not a float tensor")),
            })
            .collect()
    }
}

fn float(v: &Value) -> Result<&Tensor, DetectError> {
    match v {
        Value::F(t) => Ok(t),
        Value::I(..) => Err(bad("expected a float tensor")),
    }
}

fn ints(v: &Value) -> Result<&[i64], DetectError> {
    match v {
        Value::I(_, d) => Ok(d),
        Value::F(_) => Err(bad("expected integers")),
    }
}

fn axis(a: i64, rank: usize) -> Result<usize, DetectError> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(bad(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

fn arg<'a>(args: &[&'a Value], i: usize) -> Result<&'a Value, DetectError> {
    args.get(i).copied().ok_or_else(|| bad("missing input"))
}

/// Pads each dimension by `(before, after)` pairs with `value`.
fn pad(x: &Tensor, pads: &[i64], value: f32) -> Result<Tensor, DetectError> {
    if pads.len() != 2 * x.rank() || pads.iter().any(|&p| p < 0) {
        return Err(bad("paddings do not fit the tensor"));
    }
    let mut t = x.clone();
    for d in 0..x.rank() {
        let (l, r) = (pads[2 * d] as usize, pads[2 * d + 1] as usize);
        if l == 0 && r == 0 {
            continue;
        }
        if value == 0.0 {
            t = t.pad_with_zeros(d, l, r)?;
        } else {
            let mut parts = Vec::with_capacity(3);
            let mut shape = t.dims().to_vec();
            if l > 0 {
                shape[d] = l;
                parts.push(Tensor::full(value, shape.clone(), t.device())?);
            }
            parts.push(t.clone());
            if r > 0 {
                shape[d] = r;
                parts.push(Tensor::full(value, shape.clone(), t.device())?);
            }
            t = Tensor::cat(&parts, d)?;
        }
    }
    Ok(t)
}

fn eval(node: &Node, args: &[&Value]) -> Result<Vec<Value>, DetectError> {
    let f = |v: Tensor| Ok(vec![Value::F(v)]);
    match node.op {
        Op::Placeholder | Op::Const => Err(bad("evaluated as an operator")),
        Op::Identity => Ok(vec![arg(args, 0)?.clone()]),
        Op::Transpose => {
            let x = float(arg(args, 0)?)?;
            let perm: Vec<usize> = ints(arg(args, 1)?)?
                .iter()
                .map(|&p| axis(p, x.rank()))
                .collect::<Result<_, _>>()?;
            f(x.permute(perm)?)
        }
        Op::Pad => f(pad(float(arg(args, 0)?)?, ints(arg(args, 1)?)?, 0.0)?),
        Op::PadV2 => {
            let c = float(arg(args, 2)?)?.flatten_all()?.to_vec1::<f32>()?;
            let c = *c.first().ok_or_else(|| bad("no constant value"))?;
            f(pad(float(arg(args, 0)?)?, ints(arg(args, 1)?)?, c)?)
        }
        Op::Conv2D { stride, padding } => f(conv_nhwc(
            float(arg(args, 0)?)?,
            float(arg(args, 1)?)?,
            stride,
            padding,
        )?),
        Op::MaxPool {
            kernel,
            stride,
            pad,
        } => f(max_pool_nhwc(float(arg(args, 0)?)?, kernel, stride, pad)?),
        Op::Add => match (arg(args, 0)?, arg(args, 1)?) {
            (Value::F(a), Value::F(b)) => {
                // A per-channel bias on a transposed view: added in the memory's own order.
                if let (Some((base, back)), 1) = (memory_order(a), b.rank()) {
                    if back == [0, 2, 3, 1] && b.dim(0)? == base.dim(1)? {
                        let b = b.reshape((1, b.dim(0)?, 1, 1))?;
                        return f(base.broadcast_add(&b)?.permute(back)?);
                    }
                }
                // Two views of the same shape over memory in the same other order.
                if let (Some((x, back)), Some((y, back2))) = (memory_order(a), memory_order(b)) {
                    if back == back2 && x.dims() == y.dims() {
                        return f((x + y)?.permute(back)?);
                    }
                }
                f(a.broadcast_add(b)?)
            }
            (Value::I(sa, a), Value::I(sb, b)) if sa == sb => Ok(vec![Value::I(
                sa.clone(),
                a.iter().zip(b).map(|(x, y)| x + y).collect(),
            )]),
            _ => Err(bad("Add of mismatched values")),
        },
        Op::LeakyRelu(alpha) => f(elementwise(float(arg(args, 0)?)?, |x| {
            x.maximum(&(x * f64::from(alpha))?)
        })?),
        Op::Sigmoid => f(elementwise(float(arg(args, 0)?)?, candle_nn::ops::sigmoid)?),
        Op::Concat => {
            let (last, parts) = args.split_last().ok_or_else(|| bad("no inputs"))?;
            let a = *ints(last)?.first().ok_or_else(|| bad("no axis"))?;
            let parts = parts
                .iter()
                .map(|v| float(v))
                .collect::<Result<Vec<_>, _>>()?;
            let first = parts.first().ok_or_else(|| bad("nothing to join"))?;
            let a = axis(a, first.rank())?;
            // Views over memory in one other order are joined in that order.
            let bases: Option<Vec<(Tensor, [usize; 4])>> =
                parts.iter().map(|p| memory_order(p)).collect();
            if let Some(bases) = bases {
                let back = bases.first().map(|b| b.1);
                if let Some(back) = back.filter(|bk| bases.iter().all(|b| b.1 == *bk)) {
                    let tensors: Vec<Tensor> = bases.into_iter().map(|b| b.0).collect();
                    return f(Tensor::cat(&tensors, back[a])?.permute(back)?);
                }
            }
            f(Tensor::cat(&parts, a)?)
        }
        Op::SplitV => {
            let x = float(arg(args, 0)?)?;
            let sizes = ints(arg(args, 1)?)?;
            let a = axis(
                *ints(arg(args, 2)?)?.first().ok_or_else(|| bad("no axis"))?,
                x.rank(),
            )?;
            let mut at = 0usize;
            let mut out = Vec::new();
            for &s in sizes {
                let s = usize::try_from(s).map_err(|_| bad("negative split"))?;
                out.push(Value::F(x.narrow(a, at, s)?));
                at += s;
            }
            if at != x.dim(a)? {
                return Err(bad("splits do not add up"));
            }
            Ok(out)
        }
        Op::Reshape => {
            let x = float(arg(args, 0)?)?;
            let want = ints(arg(args, 1)?)?;
            let known: i64 = want.iter().filter(|&&d| d != -1).product();
            let mut shape = Vec::with_capacity(want.len());
            for &d in want {
                shape.push(if d == -1 {
                    if known <= 0 {
                        return Err(bad("cannot infer a dimension"));
                    }
                    x.elem_count() / known as usize
                } else {
                    usize::try_from(d).map_err(|_| bad("negative dimension"))?
                });
            }
            f(x.reshape(shape)?)
        }
        Op::ResizeBilinear => {
            let x = float(arg(args, 0)?)?;
            let size = ints(arg(args, 1)?)?;
            let [h, w] = size else {
                return Err(bad("size is not (height, width)"));
            };
            let (h, w) = (*h as usize, *w as usize);
            // Half-pixel centres are PyTorch's `align_corners = false`, which candle follows.
            let y = x
                .permute((0, 3, 1, 2))?
                .contiguous()?
                .upsample_bilinear2d(h, w, false)?;
            f(y.permute((0, 2, 3, 1))?)
        }
        Op::SparseToDense => {
            let (ishape, idx) = match arg(args, 0)? {
                Value::I(s, d) => (s.clone(), d.clone()),
                Value::F(_) => return Err(bad("float indices")),
            };
            let shape: Vec<usize> = ints(arg(args, 1)?)?
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| bad("negative dimension")))
                .collect::<Result<_, _>>()?;
            let values = ints(arg(args, 2)?)?;
            let default = ints(arg(args, 3)?)?.first().copied().unwrap_or(0);
            let total: usize = shape.iter().product();
            let mut out = vec![default; total];
            let rank = ishape.get(1).copied().unwrap_or(1).max(1);
            for (k, coords) in idx.chunks(rank).enumerate() {
                let mut at = 0usize;
                for (d, &c) in coords.iter().enumerate() {
                    let c = usize::try_from(c).map_err(|_| bad("negative index"))?;
                    at = at * shape.get(d).copied().unwrap_or(1) + c;
                }
                let v = if values.len() == 1 {
                    values[0]
                } else {
                    values.get(k).copied().unwrap_or(default)
                };
                *out.get_mut(at).ok_or_else(|| bad("index out of range"))? = v;
            }
            Ok(vec![Value::I(shape, out)])
        }
    }
}

/// A convolution in NHWC: each output pixel's receptive field laid out as one row (the
/// filter taps in HWIO order, zeros where the padding is), then one matrix product with the
/// HWIO filter read as a `[kh·kw·cin, cout]` matrix, whose result is the NHWC output itself.
/// A 1×1 convolution with stride 1 is the product alone. (candle's own convolution is NCHW,
/// and its tiled path ran this graph's convolutions at a fifth of the matrix product's rate.)
fn conv_nhwc(
    x: &Tensor,
    k: &Tensor,
    stride: (usize, usize),
    pad: usize,
) -> Result<Tensor, DetectError> {
    let (n, h, w, ci) = x.dims4()?;
    let (kh, kw, kci, co) = k.dims4()?;
    if kci != ci {
        return Err(bad(format!("filter reads {kci} channels, input has {ci}")));
    }
    let (sh, sw) = stride;
    if h + 2 * pad < kh || w + 2 * pad < kw || sh == 0 || sw == 0 {
        return Err(bad("the filter is larger than the padded input"));
    }
    let (oh, ow) = ((h + 2 * pad - kh) / sh + 1, (w + 2 * pad - kw) / sw + 1);
    let kmat = k.reshape((kh * kw * ci, co))?;
    let x = x.contiguous()?;
    if kh == 1 && kw == 1 && sh == 1 && sw == 1 && pad == 0 {
        let y = x.reshape((n * h * w, ci))?.matmul(&kmat)?;
        return Ok(y.reshape((n, oh, ow, co))?);
    }
    let src = x.flatten_all()?.to_vec1::<f32>()?;
    let row = kh * kw * ci;
    let mut col = vec![0f32; n * oh * ow * row];
    for b in 0..n {
        let image = &src[b * h * w * ci..(b + 1) * h * w * ci];
        for oy in 0..oh {
            for ox in 0..ow {
                let at = ((b * oh + oy) * ow + ox) * row;
                let out = &mut col[at..at + row];
                for ky in 0..kh {
                    let iy = (oy * sh + ky) as isize - pad as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    for kx in 0..kw {
                        let ix = (ox * sw + kx) as isize - pad as isize;
                        if ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let from = (iy as usize * w + ix as usize) * ci;
                        let to = (ky * kw + kx) * ci;
                        out[to..to + ci].copy_from_slice(&image[from..from + ci]);
                    }
                }
            }
        }
    }
    let col = Tensor::from_vec(col, (n * oh * ow, row), &Device::Cpu)?;
    Ok(col.matmul(&kmat)?.reshape((n, oh, ow, co))?)
}

/// Max pooling in NHWC, with the padding a fused `PadV2` gave (see [`Op::MaxPool`]).
fn max_pool_nhwc(
    x: &Tensor,
    kernel: (usize, usize),
    stride: (usize, usize),
    pad: Option<(usize, f32)>,
) -> Result<Tensor, DetectError> {
    let (n, h, w, c) = x.dims4()?;
    let (kh, kw) = kernel;
    let (sh, sw) = stride;
    let (p, value) = pad.unwrap_or((0, f32::NEG_INFINITY));
    if h + 2 * p < kh || w + 2 * p < kw || sh == 0 || sw == 0 || kh == 0 || kw == 0 {
        return Err(bad("the window is larger than the padded input"));
    }
    let (oh, ow) = ((h + 2 * p - kh) / sh + 1, (w + 2 * p - kw) / sw + 1);
    let src = x.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![f32::NEG_INFINITY; n * oh * ow * c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                let at = ((b * oh + oy) * ow + ox) * c;
                let dst = &mut out[at..at + c];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let iy = (oy * sh + ky) as isize - p as isize;
                        let ix = (ox * sw + kx) as isize - p as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            dst.iter_mut().for_each(|d| *d = d.max(value));
                            continue;
                        }
                        let from = ((b * h + iy as usize) * w + ix as usize) * c;
                        for (d, &v) in dst.iter_mut().zip(&src[from..from + c]) {
                            *d = d.max(v);
                        }
                    }
                }
            }
        }
    }
    Ok(Tensor::from_vec(out, (n, oh, ow, c), &Device::Cpu)?)
}

/// A 4-D view whose memory is contiguous in another order: that tensor, and the permutation
/// that gives the view back.
fn memory_order(x: &Tensor) -> Option<(Tensor, [usize; 4])> {
    if x.rank() != 4 || x.is_contiguous() {
        return None;
    }
    for (to, back) in [([0, 3, 1, 2], [0, 2, 3, 1]), ([0, 2, 3, 1], [0, 3, 1, 2])] {
        if let Ok(base) = x.permute(to) {
            if base.is_contiguous() {
                return Some((base, back));
            }
        }
    }
    None
}

/// An element-wise operator, run in the memory's own order on a transposed view (a plain
/// pass instead of a strided one; the same values).
fn elementwise(
    x: &Tensor,
    op: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> Result<Tensor, DetectError> {
    Ok(match memory_order(x) {
        Some((base, back)) => op(&base)?.permute(back)?,
        None => op(x)?,
    })
}

/// Pads taken over by their readers, at load: a `Pad` of zeros read only by a `Transpose` to
/// NHWC read only by a convolution (the convolution pads as it reads), and a `PadV2` read
/// the same way by a max pooling (the pooling counts the pad value at the edges). Either
/// pad must be equal on every side of the two spatial axes of its NCHW input; the pad is no
/// longer run.
fn fuse_pads(
    nodes: &mut [Node],
    consts: &HashMap<usize, Value>,
    readers: &HashMap<usize, Vec<(usize, usize)>>,
) {
    for n in 0..nodes.len() {
        let want = match nodes[n].op {
            Op::Conv2D { padding: 0, .. } => Op::Pad,
            Op::MaxPool { pad: None, .. } => Op::PadV2,
            _ => continue,
        };
        let Some((t, source, side, value)) = pad_before(nodes, consts, readers, n, want) else {
            continue;
        };
        nodes[n].op = match (nodes[n].op, value) {
            (Op::Conv2D { stride, .. }, None) => Op::Conv2D {
                stride,
                padding: side,
            },
            (Op::MaxPool { kernel, stride, .. }, Some(v)) => Op::MaxPool {
                kernel,
                stride,
                pad: Some((side, v)),
            },
            _ => continue,
        };
        nodes[t].inputs[0] = source;
    }
}

/// `(transpose, the pad's input, side, PadV2's value)`, see [`pad_before`].
type PadBefore = (usize, (usize, usize), usize, Option<f32>);

/// For node `n` reading `Transpose(pad, [0, 2, 3, 1])`, where each is read only by the next
/// and `pad` (of operator `want`) pads both spatial axes of an NCHW tensor equally: the
/// transpose, the pad's input, the side, and (for `PadV2`) the pad value.
fn pad_before(
    nodes: &[Node],
    consts: &HashMap<usize, Value>,
    readers: &HashMap<usize, Vec<(usize, usize)>>,
    n: usize,
    want: Op,
) -> Option<PadBefore> {
    let only_reader = |i: usize| match readers.get(&i).map(Vec::as_slice) {
        Some([(r, 0)]) => Some(*r),
        _ => None,
    };
    let ints = |i: usize| match consts.get(&i) {
        Some(Value::I(_, v)) => Some(v.as_slice()),
        _ => None,
    };
    let &(t, 0) = nodes[n].inputs.first()? else {
        return None;
    };
    if nodes[t].op != Op::Transpose || only_reader(t) != Some(n) {
        return None;
    }
    let (&(p, 0), &(perm, _)) = (nodes[t].inputs.first()?, nodes[t].inputs.get(1)?) else {
        return None;
    };
    if nodes[p].op != want || only_reader(p) != Some(t) || ints(perm)? != [0, 2, 3, 1] {
        return None;
    }
    let &[0, 0, 0, 0, a, b, c, d] = ints(nodes[p].inputs.get(1)?.0)? else {
        return None;
    };
    if !(a == b && b == c && c == d && a > 0) {
        return None;
    }
    let value = match want {
        Op::PadV2 => match consts.get(&nodes[p].inputs.get(2)?.0)? {
            Value::F(v) => Some(*v.flatten_all().ok()?.to_vec1::<f32>().ok()?.first()?),
            Value::I(..) => return None,
        },
        _ => None,
    };
    Some((t, *nodes[p].inputs.first()?, a as usize, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(dims: &[usize], scale: f32) -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 97) as f32 - 48.0) * scale)
            .collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor) -> f32 {
        let d = (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0));
        d.and_then(|d| d.to_scalar::<f32>())
            .unwrap_or(f32::INFINITY)
    }

    #[test]
    fn the_nhwc_convolution_is_candles_nchw_one() {
        for (h, w, ci, co, k, stride, pad) in [
            (9, 7, 3, 5, 3, 2, 1),
            (8, 8, 4, 6, 3, 1, 1),
            (6, 5, 8, 3, 1, 1, 0),
            (7, 7, 2, 2, 3, 2, 0),
        ] {
            let x = ramp(&[1, h, w, ci], 0.01);
            let kernel = ramp(&[k, k, ci, co], 0.02);
            let ours = conv_nhwc(&x, &kernel, (stride, stride), pad).ok();
            let theirs = x
                .permute((0, 3, 1, 2))
                .and_then(|x| x.conv2d(&kernel.permute((3, 2, 0, 1))?, pad, stride, 1, 1))
                .and_then(|y| y.permute((0, 2, 3, 1)))
                .ok();
            let (Some(ours), Some(theirs)) = (ours, theirs) else {
                panic!("a convolution failed");
            };
            assert_eq!(ours.dims(), theirs.dims());
            assert!(close(&ours, &theirs) < 1e-4, "{h}×{w}×{ci} → {co}, k {k}");
        }
    }

    #[test]
    fn padded_max_pooling_counts_the_pad_value_at_the_edges() {
        let x = ramp(&[1, 5, 5, 3], 1.0);
        let padded = pad(
            &x.permute((0, 3, 1, 2)).unwrap(),
            &[0, 0, 0, 0, 1, 1, 1, 1],
            -1e4,
        )
        .and_then(|p| {
            Ok(p.max_pool2d_with_stride((3, 3), (2, 2))?
                .permute((0, 2, 3, 1))?)
        });
        let fused = max_pool_nhwc(&x, (3, 3), (2, 2), Some((1, -1e4)));
        match (fused, padded) {
            (Ok(a), Ok(b)) => assert_eq!(close(&a, &b), 0.0),
            _ => panic!("pooling failed"),
        }
        // A pad value above every input shows in the windows that reach past an edge: all
        // of the 3×3 output but its centre (input rows and columns 1..=3).
        let high = max_pool_nhwc(&x, (3, 3), (2, 2), Some((1, 1e4)));
        let v = high
            .and_then(|t| Ok(t.flatten_all()?.to_vec1::<f32>()?))
            .unwrap_or_default();
        assert_eq!(v.len(), 27);
        for (i, x) in v.iter().enumerate() {
            assert_eq!(*x == 1e4, i / 3 != 4, "output {i}: {x}");
        }
    }
}

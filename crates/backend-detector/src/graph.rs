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
//! permute copies nothing), so NCHW → NHWC → convolution (ours is NHWC, [`conv`]) → NHWC
//! costs no copy around the convolution; the element-wise operators after it run in the
//! memory's own order ([`kernels`]). The convolutions, and the operators candle would run
//! element by element on strided views, are this crate's own loops on `f32` slices read in
//! place.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde::Deserialize;

use crate::conv;
use crate::kernels;
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
    /// (the convolution pads as it reads). `bias`: a third input, taken over from the `Add`
    /// of a constant vector that alone read the convolution; `leaky`: the `LeakyRelu` that
    /// followed that (through a transpose or not), run on each block of the output.
    ///
    /// `same`: TensorFlow's `SAME` padding where it is not equal on every side (a stride of
    /// two over an even size pads one more after than before), worked out from the input's
    /// size when it runs; a `SAME` padding equal on every side is `padding` from load.
    Conv2D {
        stride: (usize, usize),
        padding: usize,
        same: bool,
        bias: bool,
        leaky: Option<f32>,
    },
    /// One filter per channel (a channel multiplier of one), with TensorFlow's `SAME` or
    /// `VALID` padding, and a fused bias and ReLU where the graph fused them.
    Depthwise {
        stride: (usize, usize),
        same: bool,
        bias: bool,
        relu: bool,
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
    /// `half_pixel`: a source coordinate `(d + ½)·in/out − ½`; else TensorFlow's legacy
    /// `d·in/out` (neither with `align_corners`).
    ResizeBilinear {
        half_pixel: bool,
    },
    SparseToDense,
    Mul,
    Relu,
    Relu6,
    /// The mean over the axes of the second input, kept as axes of size one.
    Mean,
    /// MobileNetV3's hard swish, `scale·x · min(max(x + shift, 0), 6)`, taken over at load
    /// from the four operators that compute it ([`fuse_hard_swish`]).
    HardSwish {
        scale: f32,
        shift: f32,
    },
    /// An operator this interpreter does not run (refused at load where an output needs it).
    Unknown,
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
    /// Filters of the 3×3 convolutions with stride 1 and padding 1, transformed once for
    /// [`conv::winograd`], by convolution node.
    winograd: HashMap<usize, Vec<f32>>,
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

/// A convolution's attributes: stride, whether its padding is `SAME` (else `VALID`), and
/// whether it adds a bias (a third input) and then a ReLU. Anything else (another layout,
/// dilation, explicit padding, other fused operators) is refused.
fn convolution(node: &NodeJson) -> Result<((usize, usize), bool, bool, bool), DetectError> {
    let a = &node.attr;
    let format = str_attr(a, "data_format").unwrap_or_else(|| "NHWC".into());
    let same = match str_attr(a, "padding").unwrap_or_default().as_str() {
        "SAME" => true,
        "VALID" => false,
        other => {
            return Err(bad(format!(
                "{}: padding {other:?} not supported",
                node.name
            )));
        }
    };
    if format != "NHWC" {
        return Err(bad(format!("{}: layout {format} not supported", node.name)));
    }
    if let Ok(d) = int_list(a, "dilations") {
        if d.iter().any(|&x| x != 1) {
            return Err(bad(format!("{}: dilation not supported", node.name)));
        }
    }
    let fused: Vec<String> = a
        .get("fused_ops")
        .and_then(|v| v.get("list"))
        .and_then(|l| l.get("s"))
        .and_then(|s| s.as_array())
        .map(|list| {
            use base64::Engine as _;
            list.iter()
                .filter_map(|s| s.as_str())
                .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                .filter_map(|b| String::from_utf8(b).ok())
                .collect()
        })
        .unwrap_or_default();
    let (bias, relu) = match fused
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => (false, false),
        ["BiasAdd"] => (true, false),
        ["BiasAdd", "Relu"] => (true, true),
        other => {
            return Err(bad(format!("{}: fused {other:?} not supported", node.name)));
        }
    };
    let inputs = node.input.iter().filter(|i| !i.starts_with('^')).count();
    if inputs != 2 + usize::from(bias) {
        return Err(bad(format!("{}: {inputs} inputs", node.name)));
    }
    Ok((window(a, "strides", &node.name)?, same, bias, relu))
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
        "Conv2D" | "_FusedConv2D" => {
            let (stride, same, bias, relu) = convolution(node)?;
            Op::Conv2D {
                stride,
                padding: 0,
                same,
                bias,
                leaky: relu.then_some(0.0),
            }
        }
        "DepthwiseConv2dNative" | "FusedDepthwiseConv2dNative" => {
            let (stride, same, bias, relu) = convolution(node)?;
            Op::Depthwise {
                stride,
                same,
                bias,
                relu,
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
            if bool_attr(a, "align_corners") {
                return Err(bad(format!(
                    "ResizeBilinear {}: align_corners is not supported",
                    node.name
                )));
            }
            Op::ResizeBilinear {
                half_pixel: bool_attr(a, "half_pixel_centers"),
            }
        }
        "SparseToDense" => Op::SparseToDense,
        "Mul" => Op::Mul,
        "Relu" => Op::Relu,
        "Relu6" => Op::Relu6,
        "Mean" => {
            if !bool_attr(a, "keep_dims") {
                return Err(bad(format!("Mean {}: only keep_dims", node.name)));
            }
            Op::Mean
        }
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
        // An operator this interpreter does not know is refused only where the outputs
        // need it (a graph may hold more than the outputs asked for read).
        let mut unknown: HashMap<usize, DetectError> = HashMap::new();
        for (i, n) in model.model_topology.node.iter().enumerate() {
            let op = match parse_op(n) {
                Ok(op) => op,
                Err(e) => {
                    unknown.insert(i, e);
                    Op::Unknown
                }
            };
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
        fuse_pads(&mut nodes, &consts);
        fuse_epilogues(&mut nodes, &consts);
        resolve_same(&mut nodes, &consts);
        fuse_hard_swish(&mut nodes, &consts);
        let winograd = winograd_filters(&nodes, &consts)?;
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
        if let Some(e) = order.iter().find_map(|n| unknown.remove(n)) {
            return Err(e);
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
            winograd,
        })
    }

    /// Runs the graph on one input tensor; the outputs in the order they were named.
    pub fn run(&self, x: Tensor) -> Result<Vec<Tensor>, DetectError> {
        match pool() {
            Some(pool) => pool.install(|| self.walk(x)),
            None => self.walk(x),
        }
    }

    /// [`Graph::run`]'s walk over the nodes.
    fn walk(&self, x: Tensor) -> Result<Vec<Tensor>, DetectError> {
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
                let u = self.winograd.get(&n).map(Vec::as_slice);
                eval(node, &args, u)
                    .map_err(|e| bad(format!("{} ({:?}): {e}", node.name, node.op)))?
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

/// The threads a forward runs on, the calling thread waiting meanwhile. A forward is many
/// short parallel loops one after another; run from outside a pool, each loop would wake
/// the pool's sleeping threads, which cost several milliseconds a forward here. Inside it,
/// the thread that walks the graph takes part in each loop and the others are still
/// spinning from the last one.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("detector-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The first value of a float tensor (a constant's, where it holds one).
fn first(t: &Tensor) -> Option<f32> {
    t.flatten_all()
        .ok()?
        .to_vec1::<f32>()
        .ok()?
        .first()
        .copied()
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

/// Runs one operator; `winograd` is the transformed filter of a convolution that has one.
fn eval(node: &Node, args: &[&Value], winograd: Option<&[f32]>) -> Result<Vec<Value>, DetectError> {
    let f = |v: Tensor| Ok(vec![Value::F(v)]);
    match node.op {
        Op::Placeholder | Op::Const | Op::Unknown => Err(bad("evaluated as an operator")),
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
            let c = first(float(arg(args, 2)?)?).ok_or_else(|| bad("no constant value"))?;
            f(pad(float(arg(args, 0)?)?, ints(arg(args, 1)?)?, c)?)
        }
        Op::Conv2D {
            stride,
            padding,
            same,
            bias,
            leaky,
        } => {
            let bias = if bias {
                Some(float(arg(args, 2)?)?)
            } else {
                None
            };
            let (x, k) = (float(arg(args, 0)?)?, float(arg(args, 1)?)?);
            if same {
                // Unequal sides: the input padded with zeros first, then read unpadded.
                let (_, h, w, _) = x.dims4()?;
                let (kh, kw, _, _) = k.dims4()?;
                let (top, bottom, _) = same_padding(h, kh, stride.0);
                let (left, right, _) = same_padding(w, kw, stride.1);
                let x = arranged(x, &[0, 1, 2, 3])?
                    .pad_with_zeros(1, top, bottom)?
                    .pad_with_zeros(2, left, right)?;
                return f(conv_nhwc(&x, k, bias, stride, 0, leaky, None)?);
            }
            f(conv_nhwc(x, k, bias, stride, padding, leaky, winograd)?)
        }
        Op::Depthwise {
            stride,
            same,
            bias,
            relu,
        } => {
            let x = arranged(float(arg(args, 0)?)?, &[0, 1, 2, 3])?;
            let k = float(arg(args, 1)?)?.contiguous()?;
            let bias = if bias {
                Some(float(arg(args, 2)?)?.contiguous()?)
            } else {
                None
            };
            let (n, h, w, c) = x.dims4()?;
            let (kh, kw, kc, multiplier) = k.dims4()?;
            if kc != c || multiplier != 1 {
                return Err(bad(format!(
                    "depthwise filter {:?} for {c} channels",
                    k.dims()
                )));
            }
            let ((top, _, oh), (left, _, ow)) = if same {
                (same_padding(h, kh, stride.0), same_padding(w, kw, stride.1))
            } else {
                let valid = |size: usize, k: usize, s: usize| {
                    (0, 0, size.checked_sub(k).map_or(0, |d| d / s.max(1) + 1))
                };
                (valid(h, kh, stride.0), valid(w, kw, stride.1))
            };
            let shape = kernels::Depthwise {
                n,
                h,
                w,
                c,
                kh,
                kw,
                stride,
                before: (top, left),
                out: (oh, ow),
            };
            let bs = bias.as_ref().map(F32s::of).transpose()?;
            let out = kernels::depthwise(
                F32s::of(&x)?.get()?,
                F32s::of(&k)?.get()?,
                bs.as_ref().map(F32s::get).transpose()?,
                relu,
                shape,
            )
            .ok_or_else(|| bad("depthwise operands do not match their shapes"))?;
            f(Tensor::from_vec(out, (n, oh, ow, c), &Device::Cpu)?)
        }
        Op::Mul => match (arg(args, 0)?, arg(args, 1)?) {
            (Value::F(a), Value::F(b)) => f(binary(a, b, Arith::Mul)?),
            (Value::I(sa, a), Value::I(sb, b)) if sa == sb => Ok(vec![Value::I(
                sa.clone(),
                a.iter().zip(b).map(|(x, y)| x * y).collect(),
            )]),
            _ => Err(bad("Mul of mismatched values")),
        },
        Op::HardSwish { scale, shift } => f(unary(float(arg(args, 0)?)?, |x| {
            scale * x * (x + shift).clamp(0.0, 6.0)
        })?),
        Op::Relu => f(unary(float(arg(args, 0)?)?, |x| x.max(0.0))?),
        Op::Relu6 => f(unary(float(arg(args, 0)?)?, |x| x.clamp(0.0, 6.0))?),
        Op::Mean => {
            let x = float(arg(args, 0)?)?;
            let mut axes: Vec<usize> = ints(arg(args, 1)?)?
                .iter()
                .map(|&a| axis(a, x.rank()))
                .collect::<Result<_, _>>()?;
            axes.sort_unstable();
            axes.dedup();
            // The mean over the pixels of NHWC (a squeeze-and-excite's), in one pass.
            if axes == [1, 2] && x.rank() == 4 {
                let x = arranged(x, &[0, 1, 2, 3])?;
                let dims = x.dims4()?;
                let y = kernels::spatial_mean(F32s::of(&x)?.get()?, dims)
                    .ok_or_else(|| bad("nothing to average"))?;
                return f(Tensor::from_vec(y, (dims.0, 1, 1, dims.3), &Device::Cpu)?);
            }
            let mut y = x.clone();
            for a in axes {
                y = y.mean_keepdim(a)?;
            }
            f(y)
        }
        Op::MaxPool {
            kernel,
            stride,
            pad,
        } => {
            let x = arranged(float(arg(args, 0)?)?, &[0, 1, 2, 3])?;
            let dims = x.dims4()?;
            let (n, _, _, c) = dims;
            let pad = pad.unwrap_or((0, f32::NEG_INFINITY));
            let (out, (oh, ow)) =
                kernels::max_pool(F32s::of(&x)?.get()?, dims, kernel, stride, pad)
                    .ok_or_else(|| bad("the window is larger than the padded input"))?;
            f(Tensor::from_vec(out, (n, oh, ow, c), &Device::Cpu)?)
        }
        Op::Add => match (arg(args, 0)?, arg(args, 1)?) {
            (Value::F(a), Value::F(b)) => {
                // A per-channel bias on a transposed view: added in the memory's own order.
                if let (Some((base, back)), 1) = (memory_order(a), b.rank()) {
                    if back == [0, 2, 3, 1] && b.dim(0)? == base.dim(1)? {
                        let b = b.reshape((1, b.dim(0)?, 1, 1))?;
                        return f(base.broadcast_add(&b)?.permute(back)?);
                    }
                }
                // Two tensors of one shape: added in the first one's memory order.
                if a.dims() == b.dims() && a.rank() == 4 {
                    let (base, back) = layout(a)?;
                    let to = inverse(&back);
                    let b = arranged(b, &to)?;
                    let sum =
                        kernels::zip(F32s::of(&base)?.get()?, F32s::of(&b)?.get()?, |x, y| x + y)
                            .ok_or_else(|| bad("Add of mismatched sizes"))?;
                    let sum = Tensor::from_vec(sum, base.dims(), &Device::Cpu)?;
                    return f(sum.permute(back)?);
                }
                f(binary(a, b, Arith::Add)?)
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
        Op::Sigmoid => {
            let (base, back) = layout(float(arg(args, 0)?)?)?;
            let y = kernels::sigmoid(F32s::of(&base)?.get()?);
            f(Tensor::from_vec(y, base.dims(), &Device::Cpu)?.permute(back)?)
        }
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
                    if back[a] == 3 {
                        // Joined along the memory's last axis: pixel by pixel.
                        return f(concat_last(&tensors)?.permute(back)?);
                    }
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
        Op::ResizeBilinear { half_pixel } => {
            let x = float(arg(args, 0)?)?;
            let size = ints(arg(args, 1)?)?;
            let [h, w] = size else {
                return Err(bad("size is not (height, width)"));
            };
            let (h, w) = (*h as usize, *w as usize);
            let x = arranged(x, &[0, 1, 2, 3])?;
            let dims = x.dims4()?;
            let y = kernels::resize_bilinear(F32s::of(&x)?.get()?, dims, (h, w), half_pixel)
                .ok_or_else(|| bad("nothing to resize"))?;
            f(Tensor::from_vec(y, (dims.0, h, w, dims.3), &Device::Cpu)?)
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

/// `f` of each element, in one pass over the tensor's memory.
fn unary(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor, DetectError> {
    let (base, back) = layout(x)?;
    let y = kernels::map(F32s::of(&base)?.get()?, f);
    Ok(Tensor::from_vec(y, base.dims(), &Device::Cpu)?.permute(back)?)
}

/// An element-wise operator of two operands.
#[derive(Debug, Clone, Copy)]
enum Arith {
    Add,
    Mul,
}

impl Arith {
    fn of(self, x: f32, y: f32) -> f32 {
        match self {
            Arith::Add => x + y,
            Arith::Mul => x * y,
        }
    }
}

/// `a op b` with broadcasting, in one pass where both are contiguous and either have one
/// shape, or one is a single value, or one holds a value per channel of the other's
/// `[n, h, w, c]` (`[n, 1, 1, c]`, or `[c]`); by candle's broadcasting otherwise. Both
/// operators commute, so the larger operand may come first.
fn binary(a: &Tensor, b: &Tensor, op: Arith) -> Result<Tensor, DetectError> {
    let f = move |x: f32, y: f32| op.of(x, y);
    let both = a.is_contiguous() && b.is_contiguous();
    if both && a.dims() == b.dims() {
        let y = kernels::zip(F32s::of(a)?.get()?, F32s::of(b)?.get()?, f)
            .ok_or_else(|| bad("operands do not match"))?;
        return Ok(Tensor::from_vec(y, a.dims(), &Device::Cpu)?);
    }
    let (big, small) = if a.elem_count() >= b.elem_count() {
        (a, b)
    } else {
        (b, a)
    };
    if both && small.elem_count() == 1 && big.rank() >= small.rank() {
        let v = first(small).ok_or_else(|| bad("no value"))?;
        let y = kernels::map(F32s::of(big)?.get()?, |x| f(x, v));
        return Ok(Tensor::from_vec(y, big.dims(), &Device::Cpu)?);
    }
    if let (true, Ok((n, _, _, c))) = (both, big.dims4()) {
        if small.dims() == [n, 1, 1, c] || (n == 1 && small.dims() == [c]) {
            let y = kernels::per_channel(F32s::of(big)?.get()?, F32s::of(small)?.get()?, n, f)
                .ok_or_else(|| bad("operands do not match"))?;
            return Ok(Tensor::from_vec(y, big.dims(), &Device::Cpu)?);
        }
    }
    Ok(match op {
        Arith::Add => a.broadcast_add(b)?,
        Arith::Mul => a.broadcast_mul(b)?,
    })
}

/// A convolution in NHWC with its fused bias and activation (see [`conv::conv2d`]); the
/// filter is HWIO, as the graph stores it.
fn conv_nhwc(
    x: &Tensor,
    k: &Tensor,
    bias: Option<&Tensor>,
    stride: (usize, usize),
    pad: usize,
    leaky: Option<f32>,
    winograd: Option<&[f32]>,
) -> Result<Tensor, DetectError> {
    let (n, h, w, ci) = x.dims4()?;
    let (kh, kw, kci, co) = k.dims4()?;
    if kci != ci {
        return Err(bad(format!("filter reads {kci} channels, input has {ci}")));
    }
    let shape = conv::Shape {
        n,
        h,
        w,
        ci,
        kh,
        kw,
        co,
        stride,
        pad,
    };
    let (oh, ow) = shape
        .out()
        .ok_or_else(|| bad("the filter is larger than the padded input"))?;
    let x = arranged(x, &[0, 1, 2, 3])?;
    let (k, bias) = (k.contiguous()?, bias.map(Tensor::contiguous).transpose()?);
    let (xs, ks) = (F32s::of(&x)?, F32s::of(&k)?);
    let bs = bias.as_ref().map(F32s::of).transpose()?;
    let epi = conv::Epilogue {
        bias: bs.as_ref().map(F32s::get).transpose()?,
        leaky,
    };
    let out = match winograd {
        Some(u) => conv::winograd(xs.get()?, u, shape, epi),
        None => conv::conv2d(xs.get()?, ks.get()?, shape, epi),
    };
    let out = out.ok_or_else(|| bad("convolution operands do not match their shapes"))?;
    Ok(Tensor::from_vec(out, (n, oh, ow, co), &Device::Cpu)?)
}

/// The `f32` elements of a contiguous tensor on the CPU, read in place.
struct F32s<'a> {
    storage: std::sync::RwLockReadGuard<'a, candle_core::Storage>,
    range: std::ops::Range<usize>,
}

impl<'a> F32s<'a> {
    fn of(t: &'a Tensor) -> Result<Self, DetectError> {
        let (storage, layout) = t.storage_and_layout();
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| bad("expected a contiguous tensor"))?;
        Ok(Self {
            storage,
            range: start..end,
        })
    }

    fn get(&self) -> Result<&[f32], DetectError> {
        match &*self.storage {
            candle_core::Storage::Cpu(cpu) => cpu
                .as_slice::<f32>()?
                .get(self.range.clone())
                .ok_or_else(|| bad("tensor range outside its storage")),
            _ => Err(bad("expected a tensor in CPU memory")),
        }
    }
}

/// `x.permute(to)`, contiguous. Where `x` (4-D) is contiguous, or a view of memory in
/// another order, and the permutation asked for moves the channels between second and last
/// place, [`kernels::transpose`] lays it out; anything else is copied by candle.
fn arranged(x: &Tensor, to: &[usize]) -> Result<Tensor, DetectError> {
    let want = x.permute(to)?;
    if want.is_contiguous() {
        return Ok(want);
    }
    if x.rank() == 4 {
        let (base, back) = layout(x)?;
        // `want` is `base.permute(q)`.
        let q: Vec<usize> = to.iter().map(|&i| back[i]).collect();
        let (n, d1, d2, d3) = base.dims4()?;
        let plan = match q.as_slice() {
            [0, 2, 3, 1] => Some((d1, d2 * d3, (n, d2, d3, d1))),
            [0, 3, 1, 2] => Some((d1 * d2, d3, (n, d3, d1, d2))),
            _ => None,
        };
        if let Some((rows, cols, dims)) = plan {
            let out = kernels::transpose(F32s::of(&base)?.get()?, n, rows, cols)
                .ok_or_else(|| bad("transpose operand does not match its shape"))?;
            return Ok(Tensor::from_vec(out, dims, &Device::Cpu)?);
        }
    }
    Ok(want.contiguous()?)
}

/// Contiguous 4-D tensors of the same first three dimensions joined along the last one by
/// [`kernels::concat_last`] (candle's `cat` along it copies element by element).
fn concat_last(parts: &[Tensor]) -> Result<Tensor, DetectError> {
    let first = parts.first().ok_or_else(|| bad("nothing to join"))?;
    let (n, h, w, _) = first.dims4()?;
    let mut widths = Vec::with_capacity(parts.len());
    for p in parts {
        let (pn, ph, pw, c) = p.dims4()?;
        if (pn, ph, pw) != (n, h, w) {
            return Err(bad("joined tensors differ in shape"));
        }
        widths.push(c);
    }
    let held = parts.iter().map(F32s::of).collect::<Result<Vec<_>, _>>()?;
    let slices = held
        .iter()
        .zip(&widths)
        .map(|(s, &c)| Ok((s.get()?, c)))
        .collect::<Result<Vec<_>, DetectError>>()?;
    let out = kernels::concat_last(&slices, n * h * w)
        .ok_or_else(|| bad("joined tensors do not match their shapes"))?;
    let width = widths.iter().sum::<usize>();
    Ok(Tensor::from_vec(out, (n, h, w, width), &Device::Cpu)?)
}

/// The contiguous tensor `x` is a view of, and the permutation that gives `x` back from it
/// (the identity where `x` is contiguous; candle copies any other view).
fn layout(x: &Tensor) -> Result<(Tensor, Vec<usize>), DetectError> {
    let identity = (0..x.rank()).collect();
    if x.is_contiguous() {
        return Ok((x.clone(), identity));
    }
    Ok(match memory_order(x) {
        Some((base, back)) => (base, back.to_vec()),
        None => (x.contiguous()?, identity),
    })
}

/// The permutation that undoes `p`.
fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &k) in p.iter().enumerate() {
        if let Some(slot) = inv.get_mut(k) {
            *slot = i;
        }
    }
    inv
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

/// Who reads each node: per node, its readers and the input slot each reads it at.
struct Readers(HashMap<usize, Vec<(usize, usize)>>);

impl Readers {
    fn of(nodes: &[Node]) -> Readers {
        let mut readers: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (n, node) in nodes.iter().enumerate() {
            for (slot, &(i, _)) in node.inputs.iter().enumerate() {
                readers.entry(i).or_default().push((n, slot));
            }
        }
        Readers(readers)
    }

    /// The node's reader and slot, when exactly one input of one node reads it.
    fn only(&self, i: usize) -> Option<(usize, usize)> {
        match self.0.get(&i).map(Vec::as_slice) {
            Some([r]) => Some(*r),
            _ => None,
        }
    }
}

/// Pads taken over by their readers, at load: a `Pad` of zeros read only by a `Transpose` to
/// NHWC read only by a convolution (the convolution pads as it reads), and a `PadV2` read
/// the same way by a max pooling (the pooling counts the pad value at the edges). Either
/// pad must be equal on every side of the two spatial axes of its NCHW input; the pad is no
/// longer run.
fn fuse_pads(nodes: &mut [Node], consts: &HashMap<usize, Value>) {
    let readers = Readers::of(nodes);
    for n in 0..nodes.len() {
        let want = match nodes[n].op {
            Op::Conv2D {
                padding: 0,
                same: false,
                ..
            } => Op::Pad,
            Op::MaxPool { pad: None, .. } => Op::PadV2,
            _ => continue,
        };
        let Some((t, source, side, value)) = pad_before(nodes, consts, &readers, n, want) else {
            continue;
        };
        nodes[n].op = match (nodes[n].op, value) {
            (Op::Conv2D { stride, .. }, None) => Op::Conv2D {
                stride,
                padding: side,
                same: false,
                bias: false,
                leaky: None,
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

/// A convolution's bias and activation taken over by the convolution, at load: an `Add`
/// whose inputs are a convolution it alone reads and a constant vector of one value per
/// output channel becomes that convolution with the bias as a third input; then a
/// `LeakyRelu` reading such a convolution, directly or through a `Transpose` that it alone
/// reads (an element-wise operator commutes with a transpose), is run by the convolution and
/// itself becomes an `Identity`.
fn fuse_epilogues(nodes: &mut [Node], consts: &HashMap<usize, Value>) {
    // Read again: `fuse_pads` rewired inputs.
    let readers = Readers::of(nodes);
    let only_reader = |i: usize| readers.only(i).map(|(r, _)| r);
    let vector = |i: usize| match consts.get(&i) {
        Some(Value::F(t)) if t.rank() == 1 => Some(t.dim(0).ok()?),
        _ => None,
    };
    for a in 0..nodes.len() {
        let (Op::Add, [(c, 0), (b, 0)]) = (nodes[a].op, nodes[a].inputs.as_slice()) else {
            continue;
        };
        let (c, b) = (*c, *b);
        let Op::Conv2D {
            stride,
            padding,
            same,
            bias: false,
            leaky: None,
        } = nodes[c].op
        else {
            continue;
        };
        let Some(&(filter, 0)) = nodes[c].inputs.get(1) else {
            continue;
        };
        let co = match consts.get(&filter) {
            Some(Value::F(k)) if k.rank() == 4 => k.dim(3).ok(),
            _ => None,
        };
        if only_reader(c) != Some(a) || co.is_none() || vector(b) != co {
            continue;
        }
        let mut inputs = nodes[c].inputs.clone();
        inputs.truncate(2);
        inputs.push((b, 0));
        nodes[a].op = Op::Conv2D {
            stride,
            padding,
            same,
            bias: true,
            leaky: None,
        };
        nodes[a].inputs = inputs;
    }
    for l in 0..nodes.len() {
        let (Op::LeakyRelu(alpha), Some(&(mut src, 0))) = (nodes[l].op, nodes[l].inputs.first())
        else {
            continue;
        };
        if only_reader(src) != Some(l) {
            continue;
        }
        if nodes[src].op == Op::Transpose {
            match nodes[src].inputs.first() {
                Some(&(c, 0)) if only_reader(c) == Some(src) => src = c,
                _ => continue,
            }
        }
        if let Op::Conv2D {
            stride,
            padding,
            same,
            bias,
            leaky: None,
        } = nodes[src].op
        {
            nodes[src].op = Op::Conv2D {
                stride,
                padding,
                same,
                bias,
                leaky: Some(alpha),
            };
            nodes[l].op = Op::Identity;
        }
    }
}

/// `SAME` paddings of convolutions that pad equally on every side whatever the input's size
/// (stride one, an odd square filter): `(k − 1) / 2`, settled at load so that such a
/// convolution runs like any other (Winograd's included).
fn resolve_same(nodes: &mut [Node], consts: &HashMap<usize, Value>) {
    for node in nodes.iter_mut() {
        let Op::Conv2D {
            stride: (1, 1),
            same: true,
            bias,
            leaky,
            ..
        } = node.op
        else {
            continue;
        };
        let Some(Value::F(k)) = node.inputs.get(1).and_then(|(i, _)| consts.get(i)) else {
            continue;
        };
        if let Ok((kh, kw, _, _)) = k.dims4() {
            if kh == kw && kh % 2 == 1 {
                node.op = Op::Conv2D {
                    stride: (1, 1),
                    padding: (kh - 1) / 2,
                    same: false,
                    bias,
                    leaky,
                };
            }
        }
    }
}

/// Hard swishes taken over at load: `Mul(Mul(c, x), Relu6(Add(x, d)))`, with `c` and `d`
/// single constants and the inner three operators read only by the outer `Mul`, becomes one
/// pass over `x` instead of four (the inner operators are then read by nothing and not run).
fn fuse_hard_swish(nodes: &mut [Node], consts: &HashMap<usize, Value>) {
    let readers = Readers::of(nodes);
    let only = |i: usize, by: usize| readers.only(i).map(|(r, _)| r) == Some(by);
    let scalar = |i: usize| match consts.get(&i) {
        Some(Value::F(t)) if t.elem_count() == 1 => first(t),
        _ => None,
    };
    // The other input of a two-input node, and the constant one's value.
    let split = |node: &Node| -> Option<(usize, f32)> {
        match node.inputs.as_slice() {
            [(a, 0), (b, 0)] => match (scalar(*a), scalar(*b)) {
                (Some(v), None) => Some((*b, v)),
                (None, Some(v)) => Some((*a, v)),
                _ => None,
            },
            _ => None,
        }
    };
    for m in 0..nodes.len() {
        let (Op::Mul, [(p, 0), (q, 0)]) = (nodes[m].op, nodes[m].inputs.as_slice()) else {
            continue;
        };
        let (p, q) = (*p, *q);
        // Either order of the two factors.
        for (scaled, relu6) in [(p, q), (q, p)] {
            if nodes[scaled].op != Op::Mul || nodes[relu6].op != Op::Relu6 {
                continue;
            }
            let Some(&(add, 0)) = nodes[relu6].inputs.first() else {
                continue;
            };
            if nodes[add].op != Op::Add || !only(scaled, m) || !only(relu6, m) || !only(add, relu6)
            {
                continue;
            }
            let (Some((x, scale)), Some((x2, shift))) = (split(&nodes[scaled]), split(&nodes[add]))
            else {
                continue;
            };
            if x != x2 {
                continue;
            }
            nodes[m].op = Op::HardSwish { scale, shift };
            nodes[m].inputs = vec![(x, 0)];
            break;
        }
    }
}

/// TensorFlow's `SAME` padding of one axis: `(before, after, out)` for an input of `size`,
/// a filter of `k` and `stride` (the output is `⌈size / stride⌉`; the padding that needs,
/// the odd one after).
fn same_padding(size: usize, k: usize, stride: usize) -> (usize, usize, usize) {
    let out = size.div_ceil(stride.max(1));
    let total = ((out.saturating_sub(1)) * stride + k).saturating_sub(size);
    (total / 2, total - total / 2, out)
}

/// The fewest input and output channels for which a convolution runs as Winograd's.
const WINOGRAD_MIN_CHANNELS: usize = 64;

/// The transformed filters of the convolutions [`conv::winograd`] runs: 3×3, stride 1,
/// padding 1, at least [`WINOGRAD_MIN_CHANNELS`] in and out.
fn winograd_filters(
    nodes: &[Node],
    consts: &HashMap<usize, Value>,
) -> Result<HashMap<usize, Vec<f32>>, DetectError> {
    let mut out = HashMap::new();
    for (n, node) in nodes.iter().enumerate() {
        let Op::Conv2D {
            stride: (1, 1),
            padding: 1,
            same: false,
            ..
        } = node.op
        else {
            continue;
        };
        let Some(Value::F(k)) = node.inputs.get(1).and_then(|(i, _)| consts.get(i)) else {
            continue;
        };
        let (3, 3, ci, co) = k.dims4()? else {
            continue;
        };
        // With fewer channels the transforms cost more than the multiplications they save
        // (measured here: a forward 0.5–4.5 ms slower with them on the 16- and 32-channel layers).
        if ci < WINOGRAD_MIN_CHANNELS || co < WINOGRAD_MIN_CHANNELS {
            continue;
        }
        let k = k.contiguous()?;
        let u = conv::winograd_filter(F32s::of(&k)?.get()?, ci, co)
            .ok_or_else(|| bad("filter does not match its shape"))?;
        out.insert(n, u);
    }
    Ok(out)
}

/// `(transpose, the pad's input, side, PadV2's value)`, see [`pad_before`].
type PadBefore = (usize, (usize, usize), usize, Option<f32>);

/// For node `n` reading `Transpose(pad, [0, 2, 3, 1])`, where each is read only by the next
/// and `pad` (of operator `want`) pads both spatial axes of an NCHW tensor equally: the
/// transpose, the pad's input, the side, and (for `PadV2`) the pad value.
fn pad_before(
    nodes: &[Node],
    consts: &HashMap<usize, Value>,
    readers: &Readers,
    n: usize,
    want: Op,
) -> Option<PadBefore> {
    // The one reader of a node, reading it as its first input.
    let only_reader = |i: usize| match readers.only(i) {
        Some((r, 0)) => Some(r),
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
            Value::F(v) => Some(first(v)?),
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

    /// candle's NCHW convolution of NHWC `x` with HWIO `kernel`, then the bias and the
    /// leaky ReLU, back in NHWC.
    fn candles(
        x: &Tensor,
        kernel: &Tensor,
        (stride, pad): (usize, usize),
        bias: &Tensor,
        alpha: f64,
    ) -> candle_core::Result<Tensor> {
        let y = x
            .permute((0, 3, 1, 2))?
            .conv2d(&kernel.permute((3, 2, 0, 1))?, pad, stride, 1, 1)?
            .permute((0, 2, 3, 1))?
            .broadcast_add(bias)?;
        y.maximum(&(&y * alpha)?)
    }

    #[test]
    fn the_nhwc_convolution_is_candles_nchw_one() {
        // Small shapes, then ones whose output is cut into several blocks; and each 3×3
        // convolution with stride 1 and padding 1 also as Winograd's, on odd sizes too
        // (edge tiles only partly inside the output).
        for (n, h, w, ci, co, k, stride, pad) in [
            (1, 9, 7, 3, 5, 3, 2, 1),
            (1, 8, 8, 4, 6, 3, 1, 1),
            (1, 6, 5, 8, 3, 1, 1, 0),
            (1, 7, 7, 2, 2, 3, 2, 0),
            (1, 41, 37, 8, 12, 3, 1, 1),
            (1, 40, 40, 16, 8, 1, 1, 0),
            (1, 33, 30, 5, 7, 3, 2, 1),
            (1, 9, 7, 5, 6, 3, 1, 1),
            (3, 23, 19, 4, 5, 3, 2, 1),
        ] {
            let x = ramp(&[n, h, w, ci], 0.01);
            let kernel = ramp(&[k, k, ci, co], 0.02);
            let bias = ramp(&[co], 0.05);
            let theirs = candles(&x, &kernel, (stride, pad), &bias, 0.1).ok();
            let mut ways = vec![conv_nhwc(
                &x,
                &kernel,
                Some(&bias),
                (stride, stride),
                pad,
                Some(0.1),
                None,
            )
            .ok()];
            if (k, stride, pad) == (3, 1, 1) {
                let u = F32s::of(&kernel)
                    .and_then(|k| Ok(conv::winograd_filter(k.get()?, ci, co)))
                    .ok()
                    .flatten();
                let way = conv_nhwc(&x, &kernel, Some(&bias), (1, 1), 1, Some(0.1), u.as_deref());
                ways.push(way.ok());
            }
            for (way, ours) in ways.into_iter().enumerate() {
                let (Some(ours), Some(theirs)) = (ours, theirs.as_ref()) else {
                    panic!("a convolution failed");
                };
                assert_eq!(ours.dims(), theirs.dims());
                let d = close(&ours, theirs);
                assert!(d < 1e-4, "{n}×{h}×{w}×{ci} → {co}, k {k}, way {way}: {d}");
            }
        }
    }

    /// The paths NanoDet no longer takes once its biases and activations are folded into its
    /// convolutions, kept for graphs that do not fold: a per-channel bias added to an NHWC
    /// view of NCHW memory, and a LeakyRelu on its own.
    #[test]
    fn an_unfolded_bias_and_leaky_relu_agree_with_a_plain_computation() {
        let view = ramp(&[1, 6, 5, 7], 0.1).permute((0, 2, 3, 1)).unwrap();
        let bias = ramp(&[6], 0.5);
        let ours = eval_op(Op::Add, &[&view, &bias]);
        let theirs = view.broadcast_add(&bias).unwrap();
        assert_eq!(ours.dims(), [1, 5, 7, 6]);
        assert_eq!(close(&ours, &theirs), 0.0);
        let ours = eval_op(Op::LeakyRelu(0.1), &[&view]);
        let plain: Vec<f32> = view
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .into_iter()
            .map(|v| if v > 0.0 { v } else { 0.1 * v })
            .collect();
        let theirs = Tensor::from_vec(plain, view.dims(), &Device::Cpu).unwrap();
        assert!(close(&ours, &theirs) < 1e-6);
    }

    #[test]
    fn additions_joins_resizes_and_sigmoids_agree_with_candle_across_memory_orders() {
        let nchw = ramp(&[1, 6, 5, 7], 0.1);
        // NHWC memory seen as NCHW, and NCHW memory: added in the first one's order.
        let nhwc_view = ramp(&[1, 5, 7, 6], 0.3).permute((0, 3, 1, 2)).unwrap();
        for (a, b) in [(&nhwc_view, &nchw), (&nchw, &nhwc_view)] {
            let ours = eval_op(Op::Add, &[a, b]);
            let theirs = (a + b).unwrap();
            assert_eq!(close(&ours, &theirs), 0.0);
        }
        // Two NCHW views of NHWC memory joined along the channels.
        let other = ramp(&[1, 5, 7, 4], 0.7).permute((0, 3, 1, 2)).unwrap();
        let node = Node {
            name: "concat".into(),
            op: Op::Concat,
            inputs: vec![],
        };
        let (p, q, at) = (
            Value::F(nhwc_view.clone()),
            Value::F(other.clone()),
            Value::I(vec![1], vec![1]),
        );
        let ours = match eval(&node, &[&p, &q, &at], None).unwrap().remove(0) {
            Value::F(t) => t,
            Value::I(..) => panic!("integers"),
        };
        let theirs = Tensor::cat(&[&nhwc_view, &other], 1).unwrap();
        assert_eq!(ours.dims(), theirs.dims());
        assert_eq!(close(&ours, &theirs), 0.0);
        let ours = eval_op(Op::Sigmoid, &[&nhwc_view]);
        let theirs = candle_nn::ops::sigmoid(&nhwc_view).unwrap();
        assert!(close(&ours, &theirs) < 1e-6);
        // A resize of an NHWC view of NCHW memory, as the graph has them.
        let x = ramp(&[1, 4, 5, 3], 0.2);
        let view = x.permute((0, 3, 1, 2)).unwrap().contiguous().unwrap();
        let view = view.permute((0, 2, 3, 1)).unwrap();
        let size = Value::I(vec![2], vec![8, 10]);
        let node = Node {
            name: "resize".into(),
            op: Op::ResizeBilinear { half_pixel: true },
            inputs: vec![],
        };
        let ours = match eval(&node, &[&Value::F(view), &size], None)
            .unwrap()
            .remove(0)
        {
            Value::F(t) => t,
            Value::I(..) => panic!("integers"),
        };
        let theirs = x
            .permute((0, 3, 1, 2))
            .and_then(|x| x.upsample_bilinear2d(8, 10, false))
            .and_then(|y| y.permute((0, 2, 3, 1)))
            .unwrap();
        assert_eq!(ours.dims(), theirs.dims());
        assert!(close(&ours, &theirs) < 1e-5);
    }

    fn eval_op(op: Op, args: &[&Tensor]) -> Tensor {
        let node = Node {
            name: "op".into(),
            op,
            inputs: vec![],
        };
        let values: Vec<Value> = args.iter().map(|t| Value::F((*t).clone())).collect();
        let refs: Vec<&Value> = values.iter().collect();
        match eval(&node, &refs, None).unwrap().remove(0) {
            Value::F(t) => t,
            Value::I(..) => panic!("integers"),
        }
    }

    #[test]
    fn same_padding_puts_the_odd_one_after() {
        // Stride one, odd filters: equal sides. Stride two over an even size: one more after.
        assert_eq!(same_padding(9, 3, 1), (1, 1, 9));
        assert_eq!(same_padding(9, 5, 1), (2, 2, 9));
        assert_eq!(same_padding(512, 3, 2), (0, 1, 256));
        assert_eq!(same_padding(64, 5, 2), (1, 2, 32));
        assert_eq!(same_padding(7, 3, 2), (1, 1, 4));
    }

    #[test]
    fn depthwise_convolutions_are_candles_grouped_ones_with_tensorflows_same_padding() {
        for (h, w, c, k, stride, same, relu) in [
            (9, 7, 5, 3, 1, true, false),
            (8, 8, 6, 5, 1, true, true),
            (8, 10, 4, 3, 2, true, false),
            (12, 12, 3, 5, 2, true, true),
            (7, 9, 4, 3, 2, false, false),
        ] {
            let x = ramp(&[1, h, w, c], 0.01);
            let kernel = ramp(&[k, k, c, 1], 0.02);
            let bias = ramp(&[c], 0.05);
            let ours = {
                let node = Node {
                    name: "dw".into(),
                    op: Op::Depthwise {
                        stride: (stride, stride),
                        same,
                        bias: true,
                        relu,
                    },
                    inputs: vec![],
                };
                let (a, b, bb) = (
                    Value::F(x.clone()),
                    Value::F(kernel.clone()),
                    Value::F(bias.clone()),
                );
                match eval(&node, &[&a, &b, &bb], None).unwrap().remove(0) {
                    Value::F(t) => t,
                    Value::I(..) => panic!("integers"),
                }
            };
            // candle: pad explicitly as TensorFlow would, then a grouped NCHW convolution.
            let (top, bottom, _) = if same {
                same_padding(h, k, stride)
            } else {
                (0, 0, 0)
            };
            let (left, right, _) = if same {
                same_padding(w, k, stride)
            } else {
                (0, 0, 0)
            };
            let theirs = x
                .permute((0, 3, 1, 2))
                .and_then(|x| x.pad_with_zeros(2, top, bottom))
                .and_then(|x| x.pad_with_zeros(3, left, right))
                .and_then(|x| x.conv2d(&kernel.permute((2, 3, 0, 1))?, 0, stride, 1, c))
                .and_then(|y| y.permute((0, 2, 3, 1)))
                .and_then(|y| y.broadcast_add(&bias))
                .and_then(|y| if relu { y.relu() } else { Ok(y) })
                .unwrap();
            assert_eq!(ours.dims(), theirs.dims(), "{h}×{w}×{c} k{k} s{stride}");
            let d = close(&ours, &theirs);
            assert!(d < 1e-5, "{h}×{w}×{c} k{k} s{stride} same {same}: {d}");
        }
    }

    #[test]
    fn broadcast_products_sums_and_means_agree_with_candle() {
        let x = ramp(&[2, 5, 4, 6], 0.1);
        let per_channel = ramp(&[2, 1, 1, 6], 0.3);
        let one = Tensor::new(0.5f32, &Device::Cpu).unwrap();
        for other in [&per_channel, &one, &x] {
            for (op, theirs) in [
                (Op::Mul, x.broadcast_mul(other).unwrap()),
                (Op::Add, x.broadcast_add(other).unwrap()),
            ] {
                // Either operand first.
                assert_eq!(close(&eval_op(op, &[&x, other]), &theirs), 0.0);
                assert_eq!(close(&eval_op(op, &[other, &x]), &theirs), 0.0);
            }
        }
        let node = Node {
            name: "mean".into(),
            op: Op::Mean,
            inputs: vec![],
        };
        let (a, axes) = (Value::F(x.clone()), Value::I(vec![2], vec![1, 2]));
        let ours = match eval(&node, &[&a, &axes], None).unwrap().remove(0) {
            Value::F(t) => t,
            Value::I(..) => panic!("integers"),
        };
        let theirs = x.mean_keepdim(1).and_then(|m| m.mean_keepdim(2)).unwrap();
        assert_eq!(ours.dims(), [2, 1, 1, 6]);
        assert!(close(&ours, &theirs) < 1e-6);
        let six = eval_op(Op::Relu6, &[&(&x * 20.0).unwrap()]);
        assert!(close(&six, &(&x * 20.0).unwrap().clamp(0f32, 6f32).unwrap()) < 1e-6);
    }

    #[test]
    fn the_legacy_resize_reads_from_d_times_in_over_out() {
        // One channel, 2×2 to 4×4: source coordinates 0, ½, 1, 1½ on each axis (the last
        // between the last pixel and itself).
        let x = Tensor::from_vec(vec![0f32, 1.0, 2.0, 3.0], (1, 2, 2, 1), &Device::Cpu).unwrap();
        let node = Node {
            name: "resize".into(),
            op: Op::ResizeBilinear { half_pixel: false },
            inputs: vec![],
        };
        let (a, size) = (Value::F(x), Value::I(vec![2], vec![4, 4]));
        let ours = match eval(&node, &[&a, &size], None).unwrap().remove(0) {
            Value::F(t) => t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            Value::I(..) => panic!("integers"),
        };
        let row = |y: f32| [0.0, 0.5, 1.0, 1.0].map(|x: f32| 2.0 * y + x);
        let want: Vec<f32> = [0.0, 0.5, 1.0, 1.0].into_iter().flat_map(row).collect();
        assert_eq!(ours, want);
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
        let max_pool_nhwc = |x: &Tensor, k, st, pad| -> Result<Tensor, DetectError> {
            let dims = x.dims4()?;
            let (v, (oh, ow)) = kernels::max_pool(F32s::of(x)?.get()?, dims, k, st, pad)
                .ok_or_else(|| bad("pooling failed"))?;
            Ok(Tensor::from_vec(v, (dims.0, oh, ow, dims.3), &Device::Cpu)?)
        };
        let fused = max_pool_nhwc(&x, (3, 3), (2, 2), (1, -1e4));
        match (fused, padded) {
            (Ok(a), Ok(b)) => assert_eq!(close(&a, &b), 0.0),
            _ => panic!("pooling failed"),
        }
        // A pad value above every input shows in the windows that reach past an edge: all
        // of the 3×3 output but its centre (input rows and columns 1..=3).
        let high = max_pool_nhwc(&x, (3, 3), (2, 2), (1, 1e4));
        let v = high
            .and_then(|t| Ok(t.flatten_all()?.to_vec1::<f32>()?))
            .unwrap_or_default();
        assert_eq!(v.len(), 27);
        for (i, x) in v.iter().enumerate() {
            assert_eq!(*x == 1e4, i / 3 != 4, "output {i}: {x}");
        }
    }
}

//! A HuggingFace checkpoint folder: `config.json` and `model.safetensors` or a sharded
//! `model.safetensors.index.json`, tensors stored in f32, f16 or bf16 and converted to the run
//! dtype on load; fp8 (e4m3) weights with their scales, as HuggingFace's fine-grained FP8 and
//! compressed-tensors' float8 checkpoints store them, dequantized on load. Every failure is a
//! [`CheckpointError`] naming the file or the tensor.

use burn::tensor::{DType, Device, Tensor, TensorData};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: String,
    },
    /// A file is not what its name says (JSON, safetensors).
    #[error("{path} is not a valid {what}: {error}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// The parser's message.
        error: String,
    },
    /// `config.json` lacks a field or holds an unsupported value.
    #[error("config.json: {0}")]
    Config(String),
    /// The model needs a tensor the checkpoint does not hold.
    #[error("tensor `{0}` is missing from the checkpoint")]
    MissingTensor(String),
    /// A tensor's shape differs from what the config implies.
    #[error("tensor `{name}` has shape {got:?}, the config implies {expected:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// Its shape in the file.
        got: Vec<usize>,
        /// The shape the config implies.
        expected: Vec<usize>,
    },
    /// A tensor is stored in a dtype the loader does not convert.
    #[error(
        "tensor `{name}` is stored as {dtype}, expected F32, F16, BF16 or F8_E4M3 with a scale"
    )]
    Dtype {
        /// The tensor.
        name: String,
        /// Its stored dtype.
        dtype: String,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    std::fs::read(path).map_err(|e| CheckpointError::Io {
        path: path.to_path_buf(),
        error: e.to_string(),
    })
}

/// The tensors of a checkpoint folder, read into memory (all shards).
pub struct Checkpoint {
    dir: PathBuf,
    /// `config.json`, parsed.
    pub config: serde_json::Value,
    /// tensor name → the bytes of the shard holding it.
    index: HashMap<String, usize>,
    shards: Vec<(PathBuf, Vec<u8>)>,
}

impl Checkpoint {
    /// Opens `dir`: reads `config.json` and every safetensors shard.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref().to_path_buf();
        let config_path = dir.join("config.json");
        let config =
            serde_json::from_slice(&read(&config_path)?).map_err(|e| CheckpointError::Format {
                path: config_path.clone(),
                what: "JSON file",
                error: e.to_string(),
            })?;
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<String> = if index_path.exists() {
            let index: serde_json::Value =
                serde_json::from_slice(&read(&index_path)?).map_err(|e| {
                    CheckpointError::Format {
                        path: index_path.clone(),
                        what: "JSON file",
                        error: e.to_string(),
                    }
                })?;
            let map = index["weight_map"]
                .as_object()
                .ok_or_else(|| CheckpointError::Format {
                    path: index_path.clone(),
                    what: "safetensors index",
                    error: "no `weight_map` object".into(),
                })?;
            let mut files: Vec<String> = map
                .values()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            files.sort();
            files.dedup();
            files
        } else {
            vec!["model.safetensors".into()]
        };
        let mut checkpoint = Self {
            dir: dir.clone(),
            config,
            index: HashMap::new(),
            shards: Vec::new(),
        };
        for file in files {
            checkpoint.add_shard(dir.join(&file))?;
        }
        Ok(checkpoint)
    }

    /// Reads one safetensors file and indexes its tensors.
    fn add_shard(&mut self, path: PathBuf) -> Result<(), CheckpointError> {
        let bytes = read(&path)?;
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| CheckpointError::Format {
            path: path.clone(),
            what: "safetensors file",
            error: e.to_string(),
        })?;
        for name in tensors.names() {
            self.index.insert(name.to_string(), self.shards.len());
        }
        self.shards.push((path, bytes));
        Ok(())
    }

    /// `generation_config.json` (where the folder has one), parsed; `Null` without the file.
    fn generation_config(&self) -> Result<serde_json::Value, CheckpointError> {
        let path = self.dir.join("generation_config.json");
        if !path.exists() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&read(&path)?).map_err(|e| CheckpointError::Format {
            path: path.clone(),
            what: "JSON file",
            error: e.to_string(),
        })
    }

    /// The model's end-of-sequence ids: `eos_token_id` (one id or a list) of
    /// `generation_config.json` where that file has one, else of `config.json`; empty where
    /// neither names any. A `generation_config.json` that is not JSON is an error.
    pub fn eos_token_ids(&self) -> Result<Vec<u32>, CheckpointError> {
        let ids = |value: &serde_json::Value| -> Option<Vec<u32>> {
            let one = |v: &serde_json::Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
            match value {
                serde_json::Value::Array(list) => Some(list.iter().filter_map(one).collect()),
                v => one(v).map(|id| vec![id]),
            }
        };
        let generation = self.generation_config()?;
        Ok(ids(&generation["eos_token_id"])
            .or_else(|| ids(&self.config["eos_token_id"]))
            .unwrap_or_default())
    }

    /// The padding id transformers' `generate` masks out of a prompt given without an
    /// attention mask: `pad_token_id` (of `generation_config.json`, else `config.json`) unless
    /// it is one of the end-of-sequence ids.
    pub fn pad_token_id(&self) -> Result<Option<u32>, CheckpointError> {
        let generation = self.generation_config()?;
        let pad = [&generation["pad_token_id"], &self.config["pad_token_id"]]
            .into_iter()
            .find_map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()));
        let eos = self.eos_token_ids()?;
        Ok(pad.filter(|p| !eos.contains(p)))
    }

    /// One safetensors file on its own (no `config.json`: [`Checkpoint::config`] is null).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref().to_path_buf();
        let mut checkpoint = Self {
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            config: serde_json::Value::Null,
            index: HashMap::new(),
            shards: Vec::new(),
        };
        checkpoint.add_shard(path)?;
        Ok(checkpoint)
    }

    /// The names of the tensors held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tensor `name`, checked to have shape `dims`, converted to `dtype` on `device`.
    pub fn tensor<const D: usize>(
        &self,
        name: &str,
        dims: [usize; D],
        device: &Device,
        dtype: DType,
    ) -> Result<Tensor<D>, CheckpointError> {
        let values = self.with_view(name, |view| {
            check_shape(name, &view, &dims)?;
            match view.dtype() {
                Dtype::F8_E4M3 => self.dequantized(name, view.data(), view.shape()),
                _ => float_values(name, view.dtype(), view.data()),
            }
        })?;
        Ok(Tensor::from_data(
            TensorData::new(values, dims),
            (device, dtype),
        ))
    }

    /// The quantization `config.json` declares, checked: `None` without a
    /// `quantization_config`; an error for a method or setting the loader does not read.
    pub fn quantization(&self) -> Result<Option<Quantization>, CheckpointError> {
        Quantization::from_config(&self.config)
    }

    /// The values of the e4m3 weight `name` (`shape` `[out, in]`, bytes `codes`), each code's
    /// value times its block's scale in f32, as transformers dequantizes them (scales as
    /// [`Self::fp8_scales`] reads them).
    fn dequantized(
        &self,
        name: &str,
        codes: &[u8],
        shape: &[usize],
    ) -> Result<Vec<f32>, CheckpointError> {
        let Fp8Scales {
            rows: scales,
            block_k,
        } = self.fp8_scales(name, shape)?;
        let cols = shape[1];
        let blocks = cols.div_ceil(block_k);
        let decode: Vec<f32> = (0..=255u8)
            .map(rope_pool_kernels::common::fp8::decode_host)
            .collect();
        Ok(codes
            .iter()
            .enumerate()
            .map(|(i, &code)| {
                let (r, c) = (i / cols, i % cols);
                decode[code as usize] * scales[r * blocks + c / block_k]
            })
            .collect())
    }

    /// The e4m3 weight `name`, checked to have shape `dims` `[out, in]`, as stored: its codes
    /// four to a little-endian `u32` word (`in` a multiple of 4) and its scales one per row and
    /// block of `block_k` inner elements (a multiple of 4). `None` for a weight stored in
    /// another dtype, or whose `in` or blocks do not fall on words (the caller then reads it
    /// dequantized, [`Self::tensor`]).
    pub(crate) fn fp8_codes(
        &self,
        name: &str,
        dims: [usize; 2],
    ) -> Result<Option<(Vec<u32>, Fp8Scales)>, CheckpointError> {
        self.with_view(name, |view| {
            if view.dtype() != Dtype::F8_E4M3 {
                return Ok(None);
            }
            check_shape(name, &view, &dims)?;
            let scales = self.fp8_scales(name, &dims)?;
            if !dims[1].is_multiple_of(4) || !scales.block_k.is_multiple_of(4) {
                return Ok(None);
            }
            let words = view
                .data()
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Ok(Some((words, scales)))
        })
    }

    /// `f` of tensor `name`'s view in its shard.
    fn with_view<T>(
        &self,
        name: &str,
        f: impl FnOnce(safetensors::tensor::TensorView<'_>) -> Result<T, CheckpointError>,
    ) -> Result<T, CheckpointError> {
        let (path, bytes) = self.shard_of(name)?;
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| CheckpointError::Format {
            path: path.clone(),
            what: "safetensors file",
            error: e.to_string(),
        })?;
        let view = tensors
            .tensor(name)
            .map_err(|_| CheckpointError::MissingTensor(name.into()))?;
        f(view)
    }

    /// The shard holding tensor `name`.
    fn shard_of(&self, name: &str) -> Result<&(PathBuf, Vec<u8>), CheckpointError> {
        let &shard = self
            .index
            .get(name)
            .ok_or_else(|| CheckpointError::MissingTensor(name.into()))?;
        Ok(&self.shards[shard])
    }

    /// The scales of the e4m3 weight `name` (`shape` `[out, in]`), one per row and block of
    /// inner elements: `NAME_scale_inv` (fine-grained FP8) or `NAME_scale` (compressed-tensors)
    /// beside it, one per block of the config's `weight_block_size`, or else a grid that divides
    /// the weight (one value: per tensor; `[out, 1]`: per output channel).
    fn fp8_scales(&self, name: &str, shape: &[usize]) -> Result<Fp8Scales, CheckpointError> {
        let &[rows, cols] = shape else {
            return Err(CheckpointError::Dtype {
                name: name.into(),
                dtype: format!(
                    "F8_E4M3 of {} dimensions (weights of 2 are read)",
                    shape.len()
                ),
            });
        };
        let quantization = self.quantization()?;
        let scale_name = [format!("{name}_scale_inv"), format!("{name}_scale")]
            .into_iter()
            .find(|n| self.contains(n))
            .ok_or_else(|| {
                let suffix = match quantization {
                    Some(Quantization::CompressedFloat8 { .. }) => "_scale",
                    _ => "_scale_inv",
                };
                CheckpointError::MissingTensor(format!("{name}{suffix}"))
            })?;
        let (scales, scale_shape) = self.with_view(&scale_name, |view| {
            let values = float_values(&scale_name, view.dtype(), view.data())?;
            Ok((values, view.shape().to_vec()))
        })?;
        let grid = match scale_shape[..] {
            [] | [1] => [1, 1],
            [a] => [a, 1],
            [a, b] => [a, b],
            ref other => [other.iter().product(), 0],
        };
        let configured = match quantization {
            Some(Quantization::Fp8 { block } | Quantization::CompressedFloat8 { block }) => block,
            None => None,
        };
        let block = match configured {
            Some(block) => block,
            // One scale (per tensor), one per row (per channel), or a grid that divides the
            // weight evenly: where blocks are not named, a partial last block would be a guess.
            None => {
                let [a, b] = [grid[0].max(1), grid[1].max(1)];
                if !rows.is_multiple_of(a) || !cols.is_multiple_of(b) {
                    return Err(CheckpointError::Config(format!(
                        "`{scale_name}` is a grid of {:?} scales, which does not divide the weight [{rows}, {cols}] evenly, and the quantization_config names no block size",
                        scale_shape
                    )));
                }
                [(rows / a).max(1), (cols / b).max(1)]
            }
        };
        if grid != [rows.div_ceil(block[0]), cols.div_ceil(block[1])] {
            return Err(CheckpointError::Shape {
                name: scale_name,
                got: scale_shape.clone(),
                expected: vec![rows.div_ceil(block[0]), cols.div_ceil(block[1])],
            });
        }
        // A block past the weight is the weight (the same scales; kernels index blocks of at
        // most one row).
        let block = [block[0].min(rows.max(1)), block[1].min(cols.max(1))];
        let rows = (0..rows)
            .flat_map(|r| {
                let start = (r / block[0]) * grid[1];
                scales[start..start + grid[1]].iter().copied()
            })
            .collect();
        Ok(Fp8Scales {
            rows,
            block_k: block[1],
        })
    }
}

/// An fp8 weight's scales, one per row and block of `block_k` inner elements (`[out,
/// ceil(in / block_k)]`, row-major).
pub(crate) struct Fp8Scales {
    pub(crate) rows: Vec<f32>,
    pub(crate) block_k: usize,
}

/// The values of a tensor stored as f32, f16 or bf16 (little-endian `data`).
fn float_values(name: &str, dtype: Dtype, data: &[u8]) -> Result<Vec<f32>, CheckpointError> {
    let halves = || {
        data.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    };
    Ok(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => halves().map(|h| half::f16::from_bits(h).to_f32()).collect(),
        Dtype::BF16 => halves()
            .map(|h| half::bf16::from_bits(h).to_f32())
            .collect(),
        other => {
            return Err(CheckpointError::Dtype {
                name: name.into(),
                dtype: format!("{other:?}"),
            });
        }
    })
}

/// Quantized weights a checkpoint declares (`config.json`'s `quantization_config`): fp8 e4m3
/// weights, each with its scales (`value = e4m3 × scale` in f32, as transformers dequantizes
/// them; the activations are not quantized).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Quantization {
    /// HuggingFace's fine-grained FP8 (`quant_method: "fp8"`, `fmt: "e4m3"`): each weight's
    /// `weight_scale_inv` holds one scale per block of `weight_block_size` (`None`: per tensor).
    Fp8 {
        /// `weight_block_size`, `[rows, columns]`.
        block: Option<[usize; 2]>,
    },
    /// compressed-tensors' float8 (`quant_method: "compressed-tensors"`, symmetric 8-bit `float`
    /// weights): `weight_scale` per tensor, per output channel or per block.
    CompressedFloat8 {
        /// The groups' `block_structure`, `[rows, columns]`, where they quantize by block
        /// (`None`: by tensor or channel).
        block: Option<[usize; 2]>,
    },
}

impl Quantization {
    /// `config`'s quantization, checked; an error names what the loader does not read.
    pub fn from_config(config: &serde_json::Value) -> Result<Option<Self>, CheckpointError> {
        let q = &config["quantization_config"];
        if q.is_null() {
            return Ok(None);
        }
        let bad = |what: String| {
            Err(CheckpointError::Config(format!(
                "quantization_config: {what}"
            )))
        };
        match q["quant_method"].as_str() {
            Some("fp8") => {
                if !matches!(q["fmt"].as_str(), None | Some("e4m3")) {
                    return bad(format!("fmt {} (e4m3 is read)", q["fmt"]));
                }
                if !matches!(q["scale_fmt"].as_str(), None | Some("float")) {
                    return bad(format!("scale_fmt {} (float is read)", q["scale_fmt"]));
                }
                let block = match block_size(&q["weight_block_size"]) {
                    Ok(block) => block,
                    Err(size) => {
                        return bad(format!(
                            "weight_block_size {size} (two positive sizes or null)"
                        ));
                    }
                };
                Ok(Some(Quantization::Fp8 { block }))
            }
            Some("compressed-tensors") => {
                let groups = q["config_groups"].as_object().filter(|g| !g.is_empty());
                let Some(groups) = groups else {
                    return bad("compressed-tensors without config_groups".into());
                };
                let mut blocks = Vec::new();
                for (name, group) in groups {
                    let w = &group["weights"];
                    let float8 =
                        w["type"].as_str() == Some("float") && w["num_bits"].as_u64() == Some(8);
                    let strategy = w["strategy"].as_str().unwrap_or("");
                    if !float8 || !matches!(strategy, "tensor" | "channel" | "block") {
                        return bad(format!(
                            "group `{name}` has {}-bit {} weights by {strategy:?} (8-bit float by tensor, channel or block is read)",
                            w["num_bits"],
                            w["type"].as_str().unwrap_or("untyped")
                        ));
                    }
                    if w["symmetric"] == serde_json::Value::Bool(false) {
                        return bad(format!(
                            "group `{name}` has asymmetric weights (a zero point; symmetric ones are read)"
                        ));
                    }
                    blocks.push(match strategy {
                        "block" => match block_size(&w["block_structure"]) {
                            Ok(Some(block)) => Some(block),
                            _ => {
                                return bad(format!(
                                    "group `{name}` has block_structure {} (two positive sizes)",
                                    w["block_structure"]
                                ));
                            }
                        },
                        _ => None,
                    });
                }
                blocks.dedup();
                match blocks[..] {
                    [block] => Ok(Some(Quantization::CompressedFloat8 { block })),
                    _ => bad(
                        "groups quantize by different blocks or strategies (one is read)".into(),
                    ),
                }
            }
            other => bad(format!(
                "quant_method {} (fp8 and compressed-tensors float8 are read)",
                other.map_or("missing".to_string(), |m| format!("`{m}`"))
            )),
        }
    }
}

/// A block size `[rows, columns]` of a config (`Ok(None)` for null); `Err` with the value where
/// it is not two positive sizes.
fn block_size(size: &serde_json::Value) -> Result<Option<[usize; 2]>, &serde_json::Value> {
    if size.is_null() {
        return Ok(None);
    }
    let sizes: Option<Vec<usize>> = size.as_array().and_then(|a| {
        a.iter()
            .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
            .collect()
    });
    match sizes.as_deref() {
        Some(&[a, b]) if a > 0 && b > 0 => Ok(Some([a, b])),
        _ => Err(size),
    }
}

/// A shape error unless `view` has shape `dims`.
fn check_shape(
    name: &str,
    view: &safetensors::tensor::TensorView<'_>,
    dims: &[usize],
) -> Result<(), CheckpointError> {
    match view.shape() == dims {
        true => Ok(()),
        false => Err(CheckpointError::Shape {
            name: name.into(),
            got: view.shape().to_vec(),
            expected: dims.to_vec(),
        }),
    }
}

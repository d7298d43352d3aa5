//! Golden cases: the safetensors files of the contract (`q k v k_pool v_pool positions slots`,
//! `expected.*` in f64, metadata `head_dim num_qo_heads num_kv_heads rope_base`, optionally
//! `expect_error`, and for variants `rope_style rotary_dim rope_scaling mrope_section
//! mrope_interleaved`), loaded, run on a device and scored. Shared by the tests and `replay`.

use crate::op::reference::ReferenceOutput;
use crate::op::{
    Dims, MRope, PoolTensor, QkNorm, RopePoolConfig, RopePoolError, RopePoolInputs, RopeScaling,
    RopeStyle, rope_pool_fused,
};
use crate::testing::{max_abs_error, norm_relative_error};
use burn::tensor::{DType, Device, DispatchTensor, Int, Tensor, TensorData};
use safetensors::{Dtype, SafeTensors};

/// The largest rank of an input a golden file may hold (the op's are 1 to 3; higher ones are
/// read so that the op's rank errors can be tested; rank 0, which Burn has no tensor for, gets
/// the rank error directly).
pub const MAX_RANK: usize = 8;

/// A host tensor of any rank, its values widened to f64.
#[derive(Clone, Debug)]
pub struct HostTensor {
    /// Shape as stored.
    pub dims: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<f64>,
    /// dtype as stored.
    pub dtype: DType,
}

/// One golden case.
#[derive(Clone, Debug)]
pub struct GoldenCase {
    /// The call's parameters, from the metadata.
    pub config: RopePoolConfig,
    /// The exact message an invalid call must return.
    pub expect_error: Option<String>,
    /// Inputs by name: `q k v k_pool v_pool positions slots`.
    pub inputs: std::collections::BTreeMap<String, HostTensor>,
    /// Expected outputs (absent for an `expect_error` case).
    pub expected: Option<ReferenceOutput>,
}

/// Errors of a golden file that is not of the documented format.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The file could not be read.
    #[error("cannot read {0}: {1}")]
    Io(String, std::io::Error),
    /// The file is not safetensors.
    #[error("not a safetensors file: {0}")]
    Format(#[from] safetensors::SafeTensorError),
    /// A required entry is missing or malformed.
    #[error("golden file: {0}")]
    Content(String),
}

pub(crate) fn host_tensor(
    view: &safetensors::tensor::TensorView<'_>,
) -> Result<HostTensor, GoldenError> {
    let bytes = view.data();
    macro_rules! read {
        ($t:ty, $conv:expr) => {
            bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| $conv(<$t>::from_le_bytes(c.try_into().unwrap())))
                .collect::<Vec<f64>>()
        };
    }
    let (values, dtype) = match view.dtype() {
        Dtype::F64 => (read!(f64, |x| x), DType::F64),
        Dtype::F32 => (read!(f32, f64::from), DType::F32),
        Dtype::F16 => (read!(u16, |x| half::f16::from_bits(x).to_f64()), DType::F16),
        Dtype::BF16 => (
            read!(u16, |x| half::bf16::from_bits(x).to_f64()),
            DType::BF16,
        ),
        Dtype::I64 => (read!(i64, |x| x as f64), DType::I64),
        Dtype::I32 => (read!(i32, f64::from), DType::I32),
        other => return Err(GoldenError::Content(format!("unsupported dtype {other:?}"))),
    };
    Ok(HostTensor {
        dims: view.shape().to_vec(),
        values,
        dtype,
    })
}

/// A golden file's metadata.
pub(crate) type Metadata = std::collections::HashMap<String, String>;

/// A golden file's bytes and metadata.
pub(crate) fn read_golden(path: &std::path::Path) -> Result<(Vec<u8>, Metadata), GoldenError> {
    let bytes = std::fs::read(path).map_err(|e| GoldenError::Io(path.display().to_string(), e))?;
    let (_, header) = SafeTensors::read_metadata(&bytes)?;
    let meta = header.metadata().clone().unwrap_or_default();
    Ok((bytes, meta))
}

/// Metadata `name`, which must be there.
pub(crate) fn field<'a>(meta: &'a Metadata, name: &str) -> Result<&'a String, GoldenError> {
    meta.get(name)
        .ok_or_else(|| GoldenError::Content(format!("metadata `{name}` missing")))
}

/// Metadata `name` as an integer.
pub(crate) fn int_field(meta: &Metadata, name: &str) -> Result<usize, GoldenError> {
    field(meta, name)?
        .parse()
        .map_err(|_| GoldenError::Content(format!("metadata `{name}` is not an integer")))
}

impl GoldenCase {
    /// Reads a golden file.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, GoldenError> {
        let (bytes, meta) = read_golden(path.as_ref())?;
        let field = |name: &str| field(&meta, name);
        let int = |name: &str| int_field(&meta, name);
        let rope_base: f64 = field("rope_base")?
            .parse()
            .map_err(|_| GoldenError::Content("metadata `rope_base` is not a number".into()))?;
        let mut config =
            RopePoolConfig::new(int("head_dim")?, int("num_qo_heads")?, int("num_kv_heads")?)
                .with_rope_base(rope_base);
        // The variant metadata (docs/CONTRACT.md, "Golden files").
        match meta.get("rope_style").map(String::as_str) {
            None | Some("neox") => {}
            Some("gptj") => config = config.with_style(RopeStyle::Gptj),
            Some(other) => {
                return Err(GoldenError::Content(format!(
                    "unknown rope_style `{other}`"
                )));
            }
        }
        if meta.contains_key("rotary_dim") {
            let rotary_dim = int("rotary_dim")?;
            if rotary_dim != config.head_dim {
                config = config.with_rotary_dim(Some(rotary_dim));
            }
        }
        let json = |name: &str| -> Result<Option<serde_json::Value>, GoldenError> {
            meta.get(name)
                .map(|text| serde_json::from_str(text))
                .transpose()
                .map_err(|e| GoldenError::Content(format!("metadata `{name}`: {e}")))
        };
        if let Some(scaling) = json("rope_scaling")? {
            let object = scaling.as_object().ok_or_else(|| {
                GoldenError::Content("metadata `rope_scaling` is not an object".into())
            })?;
            let (scaling, mrope) = RopeScaling::from_json(object, None, None)
                .map_err(|e| GoldenError::Content(e.to_string()))?;
            config = config.with_scaling(scaling);
            if let Some(mrope) = mrope {
                config = config.with_mrope(Some(mrope));
            }
        }
        if let Some(section) = json("mrope_section")? {
            let section: [usize; 3] = serde_json::from_value(section)
                .map_err(|e| GoldenError::Content(format!("metadata `mrope_section`: {e}")))?;
            let interleaved = meta.get("mrope_interleaved").is_some_and(|v| v == "true");
            config = config.with_mrope(Some(MRope {
                section,
                interleaved,
            }));
        }

        let tensors = SafeTensors::deserialize(&bytes)?;
        let mut inputs = std::collections::BTreeMap::new();
        let mut expected = std::collections::BTreeMap::new();
        for (name, view) in tensors.tensors() {
            let tensor = host_tensor(&view)?;
            match name.strip_prefix("expected.") {
                Some(out) => expected.insert(out.to_string(), tensor.values),
                None => inputs.insert(name, tensor).map(|t| t.values),
            };
        }
        for name in ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"] {
            let Some(tensor) = inputs.get(name) else {
                return Err(GoldenError::Content(format!("input `{name}` missing")));
            };
            let float = matches!(
                tensor.dtype,
                DType::F64 | DType::F32 | DType::F16 | DType::BF16
            );
            let int = matches!(name, "positions" | "slots");
            if float == int {
                let kind = if int { "integers" } else { "floating point" };
                return Err(GoldenError::Content(format!(
                    "input `{name}` is stored as {:?}: it must be {kind}",
                    tensor.dtype
                )));
            }
            if tensor.dims.len() > MAX_RANK {
                return Err(GoldenError::Content(format!(
                    "input `{name}` has rank {} (at most {MAX_RANK} is read)",
                    tensor.dims.len()
                )));
            }
        }
        let mut take = |name: &str| expected.remove(name);
        let expected = match (take("q_rot"), take("k_rot"), take("k_pool"), take("v_pool")) {
            (Some(q_rot), Some(k_rot), Some(k_pool), Some(v_pool)) => Some(ReferenceOutput {
                q_rot,
                k_rot,
                k_pool,
                v_pool,
            }),
            _ => None,
        };
        let expect_error = meta.get("expect_error").cloned();
        if expect_error.is_none() && expected.is_none() {
            return Err(GoldenError::Content("expected outputs missing".into()));
        }
        Ok(Self {
            config,
            expect_error,
            inputs,
            expected,
        })
    }

    /// The contract's rank error for input `name` (a rank this loader does not build).
    fn rank_error(&self, name: &str) -> RopePoolError {
        let dims = |name: &str| Dims(self.inputs[name].dims.clone());
        match name {
            "positions" | "slots" => RopePoolError::IndexRank {
                positions: dims("positions"),
                slots: dims("slots"),
            },
            "k_pool" | "v_pool" => RopePoolError::PoolRank {
                k_pool: dims("k_pool"),
                v_pool: dims("v_pool"),
            },
            _ => RopePoolError::QkvRank {
                q: dims("q"),
                k: dims("k"),
                v: dims("v"),
            },
        }
    }

    fn float(
        &self,
        name: &str,
        device: &Device,
        dtype: Option<DType>,
    ) -> Result<DispatchTensor, RopePoolError> {
        let t = &self.inputs[name];
        let values: Vec<f32> = t.values.iter().map(|&x| x as f32).collect();
        let data = TensorData::new(values, t.dims.clone());
        let options = (device, dtype.unwrap_or(t.dtype));
        macro_rules! of_rank {
            ($($rank:literal)*) => {
                match t.dims.len() {
                    $($rank => Ok(Tensor::<$rank>::from_data(data, options).into_dispatch()),)*
                    _ => Err(self.rank_error(name)),
                }
            };
        }
        of_rank!(1 2 3 4 5 6 7 8)
    }

    /// An integer input: i32 when its values fit, else i64 (an error when the device has no
    /// i64).
    fn int(&self, name: &str, device: &Device) -> Result<DispatchTensor, RopePoolError> {
        let t = &self.inputs[name];
        // Saturating: values past i64 are out of every range the op accepts anyway.
        let values: Vec<i64> = t.values.iter().map(|&x| x as i64).collect();
        let fits = values.iter().all(|&v| i32::try_from(v).is_ok());
        let dtype = if fits { DType::I32 } else { DType::I64 };
        if !device.supports_dtype(dtype) {
            return Err(RopePoolError::DeviceDtype {
                dtype,
                device: format!("{device:?}"),
            });
        }
        let data = TensorData::new(values, t.dims.clone());
        macro_rules! of_rank {
            ($($rank:literal)*) => {
                match t.dims.len() {
                    $($rank => Ok(Tensor::<$rank, Int>::from_data(data, (device, dtype)).into_dispatch()),)*
                    _ => Err(self.rank_error(name)),
                }
            };
        }
        of_rank!(1 2 3 4 5 6 7 8)
    }

    /// Runs the case on `device`, its float inputs stored as `dtype` (their file dtype when
    /// `None`), and reads the four outputs back as f64.
    pub fn run(
        &self,
        device: &Device,
        dtype: Option<DType>,
    ) -> Result<ReferenceOutput, RopePoolError> {
        // Any rank: a wrong one gets the op's rank error.
        let inputs = RopePoolInputs {
            q: self.float("q", device, dtype)?,
            k: self.float("k", device, dtype)?,
            v: self.float("v", device, dtype)?,
            positions: self.int("positions", device)?,
            slots: self.int("slots", device)?,
            k_pool: PoolTensor::Float(self.float("k_pool", device, dtype)?),
            v_pool: PoolTensor::Float(self.float("v_pool", device, dtype)?),
            qk_norm: QkNorm::None,
        };
        let out = rope_pool_fused(inputs, &self.config)?;
        let host = |t: Tensor<3>| -> Result<Vec<f64>, RopePoolError> {
            let read_back = |e| RopePoolError::ReadBack {
                what: format!("{e:?}"),
            };
            let data = t.try_into_data().map_err(read_back)?;
            Ok(data.iter::<f64>().collect())
        };
        Ok(ReferenceOutput {
            q_rot: host(out.q_rot)?,
            k_rot: host(out.k_rot)?,
            k_pool: host(out.k_pool.into_float())?,
            v_pool: host(out.v_pool.into_float())?,
        })
    }
}

/// The error of each output of a run against the expected values.
#[derive(Clone, Debug)]
pub struct Score {
    /// `(name, max abs error, norm-relative error)` for q_rot, k_rot, k_pool, v_pool.
    pub outputs: Vec<(&'static str, f64, f64)>,
}

impl Score {
    /// Scores `actual` against `expected`.
    pub fn new(actual: &ReferenceOutput, expected: &ReferenceOutput) -> Self {
        let pairs = [
            ("q_rot", &actual.q_rot, &expected.q_rot),
            ("k_rot", &actual.k_rot, &expected.k_rot),
            ("k_pool", &actual.k_pool, &expected.k_pool),
            ("v_pool", &actual.v_pool, &expected.v_pool),
        ];
        let outputs = pairs
            .into_iter()
            .map(|(name, a, e)| {
                let sized = a.len() == e.len();
                let nan = f64::NAN;
                let abs = if sized { max_abs_error(a, e) } else { nan };
                let rel = if sized {
                    norm_relative_error(a, e)
                } else {
                    nan
                };
                (name, abs, rel)
            })
            .collect();
        Self { outputs }
    }

    /// The worst norm-relative error (NaN when any output is NaN or missing).
    pub fn worst(&self) -> f64 {
        self.outputs.iter().fold(0.0, |m: f64, (_, _, r)| {
            if r.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(*r)
            }
        })
    }
}

/// The norm-relative tolerance for a storage dtype: f32 1e-5 (the exact angle holds every case to
/// ~2e-7), f16 2e-3, bf16 1e-2.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        _ => 1e-5,
    }
}

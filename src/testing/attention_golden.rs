//! Golden cases of `pool_attention` (metadata `op = pool_attention`): `q k_pool v_pool` (F32),
//! `qo_indptr kv_indptr kv_indices` (I32), `expected.out`, `expected.lse` (F64, `-inf` where a
//! query sees no key), metadata `head_dim num_qo_heads num_kv_heads sm_scale causal`, optional
//! `sliding_window logits_soft_cap expect_error`. Loaded, run on a device, scored.

use crate::common::PoolTensor;
use crate::pool::attention::reference::{
    AttentionReference, BatchIndices, pool_attention_reference,
};
use crate::pool::{
    PoolAttentionConfig, PoolAttentionError, PoolAttentionInputs, PoolAttentionPlan, pool_attention,
};
use crate::testing::golden::{field, host_tensor, int_field, read_golden};
use crate::testing::{GoldenError, HostTensor};
use burn::tensor::{DType, Device, Tensor, TensorData};
use safetensors::SafeTensors;
use std::collections::BTreeMap;

/// One golden case of `pool_attention`.
#[derive(Clone, Debug)]
pub struct AttentionCase {
    /// The call's parameters, from the metadata.
    pub config: PoolAttentionConfig,
    /// The exact message an invalid call must return.
    pub expect_error: Option<String>,
    /// Inputs by name: `q k_pool v_pool qo_indptr kv_indptr kv_indices`.
    pub inputs: BTreeMap<String, HostTensor>,
    /// Expected outputs (absent for an `expect_error` case).
    pub expected: Option<AttentionReference>,
}

/// A number of the metadata: plain, or as numpy prints one (`np.float64(0.25)`).
fn number(text: &str) -> Option<f64> {
    let inner = text
        .strip_prefix("np.float64(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(text);
    inner.trim().parse().ok()
}

impl AttentionCase {
    /// Whether the file at `path` is a `pool_attention` case (its metadata `op`).
    pub fn is_attention(path: impl AsRef<std::path::Path>) -> Result<bool, GoldenError> {
        let (_, meta) = read_golden(path.as_ref())?;
        Ok(meta.get("op").is_some_and(|op| op == "pool_attention"))
    }

    /// Reads a golden file.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, GoldenError> {
        let (bytes, meta) = read_golden(path.as_ref())?;
        let field = |name: &str| field(&meta, name);
        let int = |name: &str| int_field(&meta, name);
        let float = |name: &str| -> Result<f64, GoldenError> {
            number(field(name)?)
                .ok_or_else(|| GoldenError::Content(format!("metadata `{name}` is not a number")))
        };
        let mut config =
            PoolAttentionConfig::new(int("num_qo_heads")?, int("num_kv_heads")?, int("head_dim")?)
                .with_sm_scale(Some(float("sm_scale")?));
        config.causal = match field("causal")?.as_str() {
            "true" | "True" => true,
            "false" | "False" => false,
            other => {
                return Err(GoldenError::Content(format!(
                    "metadata `causal` is `{other}`, not true or false"
                )));
            }
        };
        if meta.contains_key("sliding_window") {
            config.sliding_window = Some(int("sliding_window")?);
        }
        if meta.contains_key("logits_soft_cap") {
            config.logits_soft_cap = Some(float("logits_soft_cap")?);
        }
        let tensors = SafeTensors::deserialize(&bytes)?;
        let mut inputs = BTreeMap::new();
        for name in [
            "q",
            "k_pool",
            "v_pool",
            "qo_indptr",
            "kv_indptr",
            "kv_indices",
        ] {
            let view = tensors
                .tensor(name)
                .map_err(|_| GoldenError::Content(format!("tensor `{name}` missing")))?;
            inputs.insert(name.to_string(), host_tensor(&view)?);
        }
        let expect_error = meta.get("expect_error").cloned();
        let expected = match expect_error {
            Some(_) => None,
            None => {
                let out = |name: &str| -> Result<Vec<f64>, GoldenError> {
                    let view = tensors
                        .tensor(name)
                        .map_err(|_| GoldenError::Content(format!("tensor `{name}` missing")))?;
                    Ok(host_tensor(&view)?.values)
                };
                Some(AttentionReference {
                    out: out("expected.out")?,
                    lse: out("expected.lse")?,
                })
            }
        };
        Ok(Self {
            config,
            expect_error,
            inputs,
            expected,
        })
    }

    fn ints(&self, name: &str) -> Vec<i64> {
        self.inputs[name].values.iter().map(|&x| x as i64).collect()
    }

    /// The plan of the case's index arrays on `device`.
    pub fn plan(&self, device: &Device) -> PoolAttentionPlan {
        let data = |name: &str| {
            let t = &self.inputs[name];
            TensorData::new(self.ints(name), t.dims.clone())
        };
        PoolAttentionPlan::new(
            data("qo_indptr"),
            data("kv_indptr"),
            data("kv_indices"),
            device,
        )
    }

    /// The float64 reference of the case's inputs (for a valid case).
    pub fn reference(&self) -> AttentionReference {
        let (qo, kv, idx) = (
            self.ints("qo_indptr"),
            self.ints("kv_indptr"),
            self.ints("kv_indices"),
        );
        pool_attention_reference(
            &self.config,
            &self.inputs["q"].values,
            [&self.inputs["k_pool"].values, &self.inputs["v_pool"].values],
            BatchIndices {
                qo_indptr: &qo,
                kv_indptr: &kv,
                kv_indices: &idx,
            },
        )
    }

    /// Runs the case on `device`, its float inputs stored as `dtype` (F32 when `None`), and
    /// reads `out` and `lse` back as f64.
    pub fn run(
        &self,
        device: &Device,
        dtype: Option<DType>,
    ) -> Result<AttentionReference, PoolAttentionError> {
        let float = |name: &str| {
            let t = &self.inputs[name];
            let values: Vec<f32> = t.values.iter().map(|&x| x as f32).collect();
            let data = TensorData::new(values, t.dims.clone());
            let options = (device, dtype.unwrap_or(DType::F32));
            // Any rank: a wrong one gets the op's rank error.
            match t.dims.len() {
                1 => Tensor::<1>::from_data(data, options).into_dispatch(),
                2 => Tensor::<2>::from_data(data, options).into_dispatch(),
                3 => Tensor::<3>::from_data(data, options).into_dispatch(),
                _ => Tensor::<4>::from_data(data, options).into_dispatch(),
            }
        };
        let inputs = PoolAttentionInputs {
            q: float("q"),
            k_pool: PoolTensor::Float(float("k_pool")),
            v_pool: PoolTensor::Float(float("v_pool")),
        };
        let out = pool_attention(inputs, &self.plan(device), &self.config)?;
        let host = |data: TensorData| data.iter::<f64>().collect::<Vec<f64>>();
        Ok(AttentionReference {
            out: host(out.out.into_data()),
            lse: host(out.lse.into_data()),
        })
    }
}

/// The largest error of `actual` against `expected` over `out` and `lse` (matching `-inf`s
/// count as exact; a `-inf` on one side only is an infinite error).
pub fn attention_error(actual: &AttentionReference, expected: &AttentionReference) -> f64 {
    let diff = |a: &f64, e: &f64| {
        if a == e { 0.0 } else { (a - e).abs() }
    };
    actual
        .out
        .iter()
        .zip(&expected.out)
        .chain(actual.lse.iter().zip(&expected.lse))
        .map(|(a, e)| diff(a, e))
        .fold(
            0.0,
            |m: f64, d| if d.is_nan() { f64::NAN } else { m.max(d) },
        )
}
